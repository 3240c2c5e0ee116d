"""The JetStream layout: the events and DLQ streams, the topology bucket, the drs-translator's
ownership bucket, the descheduler's placement summary and, on an install of a fleet, its mirror
of the hub's fleet view (fleet_layout.py).

Only the provisioning step (`hostaffinity bus provision`, with the `provision` identity) creates
or updates them: creating what exists with the same settings is a no-op on the server, changed
settings (a new max age, more replicas) update it in place. The services' identities may not
create, update, delete or purge anything; at start they check that what they use is there
(`missing_parts`) and say what is missing.

The bucket streams refuse roll-ups (`allow_rollup_hdrs: false`): a roll-up is one message that
removes every other of its subject, or of the whole stream, so any writer of a bucket could
wipe it, history included. The services only put and delete keys (a delete is a marker, not a
roll-up); a KV `purge` is refused. A bus provisioned by an earlier release still allows them:
provisioning turns them off in place, and until it has, the services say so and wait.

Each stream caps its consumers (`max_consumers`): readers may create ephemeral consumers, and
a runaway reader should hit a limit, not fill the servers' memory.
"""

from collections.abc import Iterable
from typing import Final

import msgspec
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError
from nats.js.kv import KeyValue

from hostaffinity.runtime.bus.fleet_layout import provision_mirror
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import (
    DLQ_STREAM,
    DLQ_SUBJECT_PREFIX,
    DRS_BUCKET,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    PLACEMENTS_BUCKET,
    TOPOLOGY_BUCKET,
)

# JetStream's error code for "stream name already in use with a different configuration".
_STREAM_CONFIG_CONFLICT: Final = 10058
_DAY: Final = 24 * 3600.0
_UNLIMITED: Final = -1
# The streams behind the buckets (JetStream names a bucket's stream KV_<bucket>).
KV_STREAM_PREFIX: Final = "KV_"
TOPOLOGY_STREAM: Final = f"{KV_STREAM_PREFIX}{TOPOLOGY_BUCKET}"
DRS_STREAM: Final = f"{KV_STREAM_PREFIX}{DRS_BUCKET}"
PLACEMENTS_STREAM: Final = f"{KV_STREAM_PREFIX}{PLACEMENTS_BUCKET}"
# Consumers per stream, from what the readers create: one ordered consumer per watch (each
# replica of a service watches the topology once; the drs-translator watches its bucket twice),
# one per `hostaffinity` command that reads, and outside subscribers' consumers on the events
# stream. A few times that, so a rollout (old and new pods together) or
# an ordered consumer's reset (a new one before the old expires) never reaches the limit.
MAX_CONSUMERS: Final = {
    EVENTS_STREAM: 64,
    DLQ_STREAM: 16,
    TOPOLOGY_STREAM: 256,
    # Each drs-translator start reads the records through ordered consumers that outlive a
    # killed process until the server expires them: a crash loop must not use the cap up.
    DRS_STREAM: 256,
    # The descheduler's watch at start, the CLI's reads, the hub's two sourcing consumers (a
    # new one may be made before the old expires when the link flaps).
    PLACEMENTS_STREAM: 64,
}


class LayoutMissing(RuntimeError):
    """A stream, bucket or consumer a service needs does not exist, or a bucket still allows
    roll-ups: the bus is not provisioned (or not since this release)."""

    @classmethod
    def naming(cls, missing: Iterable[str]) -> "LayoutMissing":
        return cls(
            f"the bus is not provisioned: {'; '.join(missing)}; run "
            "`hostaffinity bus provision` (the Job hostaffinity-bus-provision in Kubernetes, "
            "the bus-provision one-shot in compose, `make dev` locally)"
        )


class BusLayout(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Retention and replication of the streams and the bucket; every service asks for the
    same one, from the shared `nats` settings (`BusLayout.of`)."""

    events_max_age_seconds: float = 7 * _DAY
    events_max_bytes: int = _UNLIMITED
    dlq_max_age_seconds: float = 30 * _DAY
    dlq_max_bytes: int = _UNLIMITED
    # Publishes of the same event id within this window are stored once.
    duplicate_window_seconds: float = 120.0
    # Revisions kept per topology key: enough to see how a placement changed, not an archive.
    topology_history: int = 5
    # 3 on a production cluster, 1 on a single server.
    stream_replicas: int = 1
    kv_replicas: int = 1
    # This install's token in the fleet (`hostaffinity fleet join`); set, provisioning also
    # mirrors the hub's fleet view into this bus.
    fleet_install: str = ""

    @classmethod
    def of(cls, settings: NatsSettings) -> "BusLayout":
        return cls(
            events_max_age_seconds=settings.events_max_age_seconds,
            events_max_bytes=settings.events_max_bytes,
            dlq_max_age_seconds=settings.dlq_max_age_seconds,
            dlq_max_bytes=settings.dlq_max_bytes,
            duplicate_window_seconds=settings.duplicate_window_seconds,
            stream_replicas=settings.stream_replicas,
            kv_replicas=settings.kv_replicas,
            fleet_install=settings.fleet_install,
        )


def _stream(
    name: str, subject_prefix: str, max_age: float, max_bytes: int, layout: BusLayout
) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=[f"{subject_prefix}.>"],
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.OLD,
        storage=StorageType.FILE,
        max_age=max_age,
        max_bytes=max_bytes,
        duplicate_window=layout.duplicate_window_seconds,
        num_replicas=layout.stream_replicas,
        max_consumers=MAX_CONSUMERS[name],
    )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError as err:
        if err.err_code != _STREAM_CONFIG_CONFLICT:
            raise
        await js.update_stream(config)


async def _ensure_bucket(
    js: JetStreamContext, bucket: str, history: int, layout: BusLayout
) -> KeyValue:
    """Create the bucket, or bind the existing one; then make its stream what this release
    wants (history, replicas, roll-ups refused), updating in place a bucket made before."""
    try:
        store = await js.create_key_value(
            bucket=bucket, history=history, replicas=layout.kv_replicas
        )
    except BadRequestError as err:
        if err.err_code != _STREAM_CONFIG_CONFLICT:
            raise
        store = await js.key_value(bucket)
    stream = f"{KV_STREAM_PREFIX}{bucket}"
    current = (await js.stream_info(stream)).config
    # nats-py makes every bucket with roll-ups allowed (its purge is a roll-up), so even a new
    # bucket gets here; keep the rest of nats-py's KV shape.
    wanted = current.evolve(
        max_msgs_per_subject=history,
        num_replicas=layout.kv_replicas,
        allow_rollup_hdrs=False,
        max_consumers=MAX_CONSUMERS[stream],
    )
    if wanted != current:
        await js.update_stream(wanted)
    return store


async def provision_layout(js: JetStreamContext, layout: BusLayout) -> KeyValue:
    """Create or update both streams and both buckets; returns the topology bucket."""
    events_age, events_bytes = layout.events_max_age_seconds, layout.events_max_bytes
    await _ensure_stream(
        js, _stream(EVENTS_STREAM, EVENTS_SUBJECT_PREFIX, events_age, events_bytes, layout)
    )
    dlq_age, dlq_bytes = layout.dlq_max_age_seconds, layout.dlq_max_bytes
    await _ensure_stream(js, _stream(DLQ_STREAM, DLQ_SUBJECT_PREFIX, dlq_age, dlq_bytes, layout))
    # The ownership records of DRS rules: one value per key is all a reader needs.
    await _ensure_bucket(js, DRS_BUCKET, 1, layout)
    # Each workload's latest placement: what the hub sources, whether or not it is joined yet.
    await _ensure_bucket(js, PLACEMENTS_BUCKET, 1, layout)
    topology = await _ensure_bucket(js, TOPOLOGY_BUCKET, layout.topology_history, layout)
    if layout.fleet_install:
        await provision_mirror(js, layout.fleet_install, replicas=layout.kv_replicas)
    return topology


async def missing_parts(js: JetStreamContext, streams: Iterable[str]) -> list[str]:
    """What among `streams` (a bucket is its stream, KV_<bucket>) does not exist or is not as
    this release provisions it, each named for a person."""
    missing = []
    for name in streams:
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            missing.append(f"stream {name} missing")
            continue
        if name.startswith(KV_STREAM_PREFIX) and info.config.allow_rollup_hdrs:
            missing.append(
                f"bucket stream {name} allows roll-ups (any writer could wipe the bucket with "
                "one Nats-Rollup message; provisioned before this release)"
            )
    return missing
