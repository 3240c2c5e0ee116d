"""The bus's own health as `status` shows it: each of our streams' replicas and how far each
replica lags the stream leader (JetStream's stream info), and the dead-letter depth."""

from __future__ import annotations

from typing import Final

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.layout import DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.schema import DLQ_STREAM, EVENTS_STREAM
from hostaffinity.schema.reports import StreamView

# The streams the CLI's identity may inspect: the events, the dead letters, the two buckets'.
STREAMS: Final = (EVENTS_STREAM, DLQ_STREAM, TOPOLOGY_STREAM, DRS_STREAM)


async def stream_views(bus: Bus) -> list[StreamView]:
    """Each stream's state; a replica that is not current (or offline) counts as lagging."""
    views = []
    for name in STREAMS:
        info = await bus.js.stream_info(name)
        cluster = info.cluster
        peers = (cluster.replicas or []) if cluster is not None else []
        lagging = {p.name or "?": p.lag or 0 for p in peers if not p.current or p.offline}
        views.append(
            StreamView(
                name=name,
                messages=info.state.messages,
                replicas=info.config.num_replicas or 1,
                leader=(cluster.leader or "") if cluster is not None else "",
                lagging=dict(sorted(lagging.items())),
            )
        )
    return views
