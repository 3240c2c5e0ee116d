"""The fleet view as an install's services read it: its own `hostaffinity-fleet` bucket (on an
install, the hub's view mirrored into the install's domain), followed into a `FleetMembers`.

The hub is never on an install's path. Without the bucket (no hub, or not provisioned yet) the
view is empty, which is said once in the log, and the bucket is looked for again every
`retry_seconds`; while the hub is away the mirror only goes stale. As with the topology
(topology_feed.py), each connection gets a new watch that replays the bucket, and the replay
replaces what was known, so nothing a dead connection missed lingers. A value that does not
decode is logged and left out: one bad key stops nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

import msgspec
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.runtime.bus.kv import Bootstrapped, _BucketWatch
from hostaffinity.runtime.bus.topology_feed import LINK_POLL_SECONDS, Link
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.schema import FLEET_BUCKET, UNDECODABLE, WorkloadPlacement
from hostaffinity.schema.names import WORKLOAD_KEY_PREFIX

_log = logging.getLogger(__name__)
_decoder = msgspec.json.Decoder(WorkloadPlacement)
RETRY_SECONDS: Final = 5.0


def _nothing() -> None:
    return None


def is_workload_key(key: str) -> bool:
    """`<install token>.workload.<namespace>.<kind>.<name>`: a workload's placement summary
    (the view's other keys, such as each install's topology, are the hub's business)."""
    _, _, rest = key.partition(".")
    return rest.startswith(WORKLOAD_KEY_PREFIX)


def _decoded(entry: KeyValue.Entry) -> WorkloadPlacement | None:
    """The entry's placement summary; None for a deletion and for a value that does not
    decode (logged)."""
    if entry.operation in (KV_DEL, KV_PURGE):
        return None
    try:
        return _decoder.decode(entry.value or b"")
    except UNDECODABLE as error:
        _log.error("fleet view key %s left out: %s", entry.key, error)
        return None


async def follow_fleet_view(
    js: JetStreamContext,
    members: FleetMembers,
    *,
    link: Link,
    on_change: Callable[[], None] = _nothing,
    retry_seconds: float = RETRY_SECONDS,
) -> None:
    """Until cancelled: keep `members` as the bucket holds them; `on_change` after every change
    that moved, added or removed a member of another install."""
    said_missing = False
    while True:
        raise_if_cancel_requested()  # nats-py's wait_for may have swallowed it
        epoch = link()
        if epoch is None:
            await asyncio.sleep(LINK_POLL_SECONDS)
            continue
        try:
            kv = await js.key_value(FLEET_BUCKET)
        except BucketNotFoundError:
            if not said_missing:
                _log.info(
                    "no fleet view (bucket %s) on this bus: other clusters' fleet group members "
                    "are not counted until the fleet hub mirrors it here",
                    FLEET_BUCKET,
                )
                said_missing = True
            await asyncio.sleep(retry_seconds)
            continue
        except (NatsError, TimeoutError) as error:
            raise_if_cancel_requested()
            _log.warning("fleet view not read (%r); again in %gs", error, retry_seconds)
            await asyncio.sleep(retry_seconds)
            continue
        said_missing = False
        watch = asyncio.create_task(_watch(kv, members, on_change))
        try:
            while not watch.done() and link() == epoch:
                await asyncio.wait({watch}, timeout=LINK_POLL_SECONDS)
        finally:
            watch.cancel()
            await asyncio.wait({watch}, timeout=retry_seconds)
        if watch.done() and not watch.cancelled() and watch.exception() is not None:
            _log.warning(
                "fleet view watch failed (%r); reopening in %gs", watch.exception(), retry_seconds
            )
            await asyncio.sleep(retry_seconds)


async def _watch(kv: KeyValue, members: FleetMembers, on_change: Callable[[], None]) -> None:
    """Replay the bucket into a fresh view that replaces the known one, then follow it."""
    watch = await _BucketWatch.start(kv)
    try:
        replay: dict[str, WorkloadPlacement] = {}
        while not isinstance(entry := await watch.next(), Bootstrapped):
            if is_workload_key(entry.key):
                placement = _decoded(entry)
                if placement is None:
                    replay.pop(entry.key, None)
                else:
                    replay[entry.key] = placement
        if members.replace(replay):
            on_change()
        while True:
            entry = await watch.next()
            raise_if_cancel_requested()
            if isinstance(entry, Bootstrapped) or not is_workload_key(entry.key):
                continue
            if members.put(entry.key, _decoded(entry)):
                on_change()
    finally:
        await watch.stop()
