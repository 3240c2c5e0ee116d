"""The scheduler-extender's work (the runner does the rest): the cache fed from the API and the
topology KV, the sampled decision publisher, and the HTTP server kube-scheduler calls.

Ready (/readyz) once Pods, Nodes, Namespaces and placements are all loaded and the server
listens; until then filter and prioritize answer with an error, which kube-scheduler skips for an
`ignorable` extender. The parts are declared in the spec (`readiness_parts`), so /readyz is not
200 before the work has added them. When cancelled (SIGTERM) the server stops taking requests and
lets the ones in flight finish.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.runtime.bus.fleet_view import follow_fleet_view
from hostaffinity.runtime.bus.layout import TOPOLOGY_STREAM
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.runner import ServiceContext
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.config import SchedulerExtenderConfig
from hostaffinity.scheduler_extender.core.cache import SOURCES, ExtenderCache
from hostaffinity.scheduler_extender.feeds import CacheFeeds
from hostaffinity.scheduler_extender.http import ExtenderServer, server_tls
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics
from hostaffinity.schema import EVENTS_STREAM

_log = logging.getLogger(__name__)
SYNC_POLL_SECONDS = 0.5
LISTENING = "extender listening"


def _synced(source: str) -> str:
    return f"{source} synced"


def readiness_parts(_config: SchedulerExtenderConfig) -> list[str]:
    """Every part of /readyz the work adds (the spec declares them up front)."""
    return [*(_synced(source) for source in SOURCES), LISTENING]


def build_cache(settings: SchedulerExtenderConfig, cluster: str = "") -> ExtenderCache:
    """The cache of the install serving `cluster` (its identity: other clusters' fleet group
    members are told from its own by it)."""
    shared = settings.shared
    return ExtenderCache(
        physical_anti_affinity=shared.physical_anti_affinity,
        fail_unplaced=shared.fails_unplaced,
        inflight_capacity=settings.extender.inflight_capacity,
        inflight_max_age_seconds=settings.extender.inflight_max_age_seconds,
        fleet=FleetMembers(cluster),
    )


class SchedulerExtenderWork:
    """Serves kube-scheduler until cancelled; the cache and server stay visible for tests."""

    def __init__(self) -> None:
        self.cache: ExtenderCache | None = None
        self.server: ExtenderServer | None = None
        self.feeds: CacheFeeds | None = None

    async def __call__(self, ctx: ServiceContext[SchedulerExtenderConfig]) -> None:
        settings = ctx.config.extender
        cache = self.cache = build_cache(ctx.config, ctx.cluster.name)
        for source in SOURCES:
            ctx.add_readiness(_synced(source), functools.partial(cache.is_synced, source))
        ctx.add_readiness(LISTENING, lambda: self.server is not None and self.server.port != 0)
        await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, EVENTS_STREAM])
        topology = await ctx.bus.topology(parked_as=ctx.service)
        feeds = self.feeds = CacheFeeds(ctx.kube, topology, cache, link=ctx.bus.link_epoch)
        metrics = ExtenderMetrics(cache, stale=feeds.stale, lag=feeds.lag)
        decisions = SampledPublisher(
            ctx.service,
            ctx.bus.publish_event,
            ratio=settings.decision_sample_ratio,
            capacity=settings.decision_queue_size,
        )
        ctx.start(feeds.run(), name="cache-feeds")
        ctx.start(
            follow_fleet_view(ctx.bus.js, cache.fleet, link=ctx.bus.link_epoch), name="fleet-view"
        )
        ctx.start(decisions.run(), name="decision-publisher")
        ctx.start(_freeze_gc_once_synced(cache), name="gc-freeze")
        binder = Binder(ctx.kube, settings.bind_timeout_seconds)
        server = self.server = ExtenderServer(
            cache,
            binder,
            metrics,
            decisions,
            ctx.event_factory,
            max_body_bytes=settings.max_body_bytes,
            inflight_wait_seconds=settings.inflight_wait_seconds,
        )
        await server.start(
            settings.host, settings.port, server_tls(settings.tls_cert_file, settings.tls_key_file)
        )
        _log.info("scheduler-extender listening on port %d", server.port)
        try:
            await asyncio.Event().wait()  # serve until cancelled
        finally:
            _log.info("stopping: finishing requests in flight")
            await server.stop()


async def _freeze_gc_once_synced(cache: ExtenderCache) -> None:
    """After the first full lists, spare the big long-lived cache from full GC passes."""
    while not all(cache.is_synced(source) for source in SOURCES):  # noqa: ASYNC110
        await asyncio.sleep(SYNC_POLL_SECONDS)
    freeze_gc_after_initial_load()
    _log.info("cache synced; garbage collector frozen over the initial state")
