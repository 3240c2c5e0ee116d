"""The JetStream layout every service expects: the events and DLQ streams, the topology bucket and
the drs-translator's ownership bucket.

Every service runs `ensure_layout` at start, so the first one up creates the layout and the others
find it. Creating what already exists with the same settings is a no-op on the server; when the
settings changed (a new max age, more history) the existing stream is updated in place.
"""

from typing import Final

import msgspec
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from hostaffinity.schema import (
    DLQ_STREAM,
    DLQ_SUBJECT_PREFIX,
    DRS_BUCKET,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    TOPOLOGY_BUCKET,
)

# JetStream's error code for "stream name already in use with a different configuration".
_STREAM_CONFIG_CONFLICT: Final = 10058
_DAY: Final = 24 * 3600.0


class BusLayout(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Retention of the streams and the bucket; one record shared by all services."""

    events_max_age_seconds: float = 7 * _DAY
    # Publishes of the same event id within this window are stored once.
    duplicate_window_seconds: float = 120.0
    dlq_max_age_seconds: float = 30 * _DAY
    # Revisions kept per topology key: enough to see how a placement changed, not an archive.
    topology_history: int = 5
    # 3 on a production cluster, 1 on a single server.
    replicas: int = 1


def _stream(name: str, subject_prefix: str, max_age: float, layout: BusLayout) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=[f"{subject_prefix}.>"],
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.OLD,
        storage=StorageType.FILE,
        max_age=max_age,
        duplicate_window=layout.duplicate_window_seconds,
        num_replicas=layout.replicas,
    )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError as err:
        if err.err_code != _STREAM_CONFIG_CONFLICT:
            raise
        await js.update_stream(config)


async def _ensure_bucket(js: JetStreamContext, layout: BusLayout) -> KeyValue:
    try:
        return await js.create_key_value(
            bucket=TOPOLOGY_BUCKET, history=layout.topology_history, replicas=layout.replicas
        )
    except BadRequestError as err:
        if err.err_code != _STREAM_CONFIG_CONFLICT:
            raise
    # The bucket exists with other settings: change only the ones we own, keep nats-py's KV shape.
    bucket = await js.key_value(TOPOLOGY_BUCKET)
    status = await bucket.status()
    await js.update_stream(
        status.stream_info.config.evolve(
            max_msgs_per_subject=layout.topology_history, num_replicas=layout.replicas
        )
    )
    return bucket


async def _ensure_drs_bucket(js: JetStreamContext, layout: BusLayout) -> None:
    """The ownership records of DRS rules: one value per key is all a reader needs."""
    try:
        await js.create_key_value(bucket=DRS_BUCKET, history=1, replicas=layout.replicas)
    except BadRequestError as err:
        if err.err_code != _STREAM_CONFIG_CONFLICT:
            raise


async def ensure_layout(js: JetStreamContext, layout: BusLayout) -> KeyValue:
    """Create or update both streams and both buckets; returns the topology bucket."""
    await _ensure_stream(
        js, _stream(EVENTS_STREAM, EVENTS_SUBJECT_PREFIX, layout.events_max_age_seconds, layout)
    )
    await _ensure_stream(
        js, _stream(DLQ_STREAM, DLQ_SUBJECT_PREFIX, layout.dlq_max_age_seconds, layout)
    )
    await _ensure_drs_bucket(js, layout)
    return await _ensure_bucket(js, layout)
