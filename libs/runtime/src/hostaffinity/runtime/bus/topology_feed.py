"""The one loop every service follows the topology bucket with.

A watch only reports what its connection delivered. Once that connection dropped, changes may
have gone into a dead socket, and a server that lost its store never sends the deletions it
lost; nats-py's ordered consumer notices some gaps, seconds later, and none of the latter. So
every new connection gets a new watch, which replays the whole bucket, and whatever was known
before but is not replayed went away meanwhile: it is reported deleted before `Bootstrapped`.
The connection is polled rather than trusted to end the watch, since a silently dead one
never does. So is the watch itself: its consumer lives on one server, and a consumer that stops
delivering while its heartbeats still come (its replica stalled, or the consumer paused) leaves
nats-py waiting for ever on a live connection. Every `probe_seconds` the bucket's last revision
is read from the stream leader; a watch that read nothing for two probes in a row while the
bucket held more is reopened the same way.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from nats.errors import Error as NatsError

from hostaffinity.runtime.bus.kv import (
    Bootstrapped,
    HostChange,
    NodeChange,
    TopologyChange,
    TopologyStore,
    TopologyWatch,
)
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested

_log = logging.getLogger(__name__)

RETRY_SECONDS: Final = 2.0
# How often the connection is looked at; a disconnect or reconnect is acted on within this.
LINK_POLL_SECONDS: Final = 0.05
# The NATS link (`Bus.link_epoch`): how many times it reconnected, None while it is down.
Link = Callable[[], int | None]
# A deletion inferred from a replay has no entry, so no revision.
INFERRED_REVISION: Final = 0
# How often a watch's progress is held against the bucket, and for how many probes in a row
# it may read nothing while behind: a stalled watch is reopened within (STALLED_PROBES + 1) *
# PROBE_SECONDS.
PROBE_SECONDS: Final = 3.0
STALLED_PROBES: Final = 2


class _Keys:
    """Keys of one kind last reported with a value, and which of them the current watch replayed."""

    def __init__(self) -> None:
        self._live: set[str] = set()
        self._replayed: set[str] = set()

    def restart(self) -> None:
        self._replayed = set()

    def note(self, key: str, present: bool) -> None:
        self._replayed.add(key)
        (self._live.add if present else self._live.discard)(key)

    def gone(self) -> set[str]:
        """What was live before this watch and not replayed by it, forgotten from here on."""
        gone = self._live - self._replayed
        self._live -= gone
        return gone


def _nothing() -> None:
    return None


async def follow_topology(
    store: TopologyStore,
    on_change: Callable[[TopologyChange], None],
    *,
    link: Link,
    on_lost: Callable[[], None] = _nothing,
    retry_seconds: float = RETRY_SECONDS,
    probe_seconds: float = PROBE_SECONDS,
) -> None:
    """Until cancelled: every change to `on_change`, `Bootstrapped` whenever a replay is done,
    and `on_lost` whenever the view stopped being live (connection down, watch ended or
    stalled); one watch per connection, reopened after `retry_seconds` when it failed."""
    nodes, hosts = _Keys(), _Keys()
    while True:
        raise_if_cancel_requested()  # nats-py's wait_for may have swallowed it
        epoch = link()
        if epoch is None:
            on_lost()
            await asyncio.sleep(LINK_POLL_SECONDS)
            continue
        nodes.restart()
        hosts.restart()
        changes = store.watch()
        watch = asyncio.create_task(_watch(changes, on_change, nodes, hosts))
        stalled = asyncio.create_task(_until_stalled(store, changes, probe_seconds))
        try:
            while not watch.done() and not stalled.done() and link() == epoch:
                await asyncio.wait({watch, stalled}, timeout=LINK_POLL_SECONDS)
        finally:
            for task in (watch, stalled):
                task.cancel()
            await asyncio.wait({watch, stalled}, timeout=retry_seconds)
        on_lost()
        if watch.done() and not watch.cancelled() and watch.exception() is not None:
            # nats-py raises its own types for a lost connection or a missing bucket.
            _log.warning(
                "topology watch failed (%r); reopening in %gs", watch.exception(), retry_seconds
            )
            await asyncio.sleep(retry_seconds)
        elif stalled.done() and not stalled.cancelled():
            read, owed = stalled.result()
            _log.warning(
                "topology watch stalled at revision %d, the bucket at %d; reading it again",
                read,
                owed,
            )
        else:
            _log.warning("NATS connection lost or renewed; reading the topology again")


async def _until_stalled(
    store: TopologyStore, changes: TopologyWatch, probe_seconds: float
) -> tuple[int, int]:
    """Where the watch stands and the revision it owes, once it read nothing for STALLED_PROBES
    whole probes in a row while the bucket held more than it had read. A slow replay still
    moves, and one probe's worth of a busy loop is not enough, so neither is judged stalled; a
    probe that fails is skipped (a lost connection is the link's to notice)."""
    owed: int | None = None
    read_before = 0
    idle_probes = 0
    while True:
        await asyncio.sleep(probe_seconds)
        try:
            bucket_at = await store.last_revision()
        except (NatsError, TimeoutError):
            raise_if_cancel_requested()
            continue
        raise_if_cancel_requested()  # the request's wait_for may have swallowed it
        read = changes.read_up_to
        if owed is not None and read == read_before and read < owed:
            idle_probes += 1
            if idle_probes >= STALLED_PROBES:
                return read, owed
        else:
            idle_probes = 0
        owed = bucket_at if changes.started and bucket_at > read else None
        read_before = read


async def _watch(
    changes: TopologyWatch,
    on_change: Callable[[TopologyChange], None],
    nodes: _Keys,
    hosts: _Keys,
) -> None:
    async with changes:
        async for change in changes:
            raise_if_cancel_requested()  # else a swallowed cancel leaves this watch running
            if isinstance(change, NodeChange):
                nodes.note(change.node, change.placement is not None)
            elif isinstance(change, HostChange):
                hosts.note(change.moid, change.host is not None)
            elif isinstance(change, Bootstrapped):
                _report_gone(on_change, nodes.gone(), hosts.gone())
            on_change(change)


def _report_gone(
    on_change: Callable[[TopologyChange], None], nodes: set[str], hosts: set[str]
) -> None:
    """Deletions nobody delivered: keys known before that the replay lacked."""
    if nodes or hosts:
        _log.info("%d nodes and %d hosts went away while not watched", len(nodes), len(hosts))
    for node in sorted(nodes):
        on_change(NodeChange(node=node, placement=None, revision=INFERRED_REVISION))
    for moid in sorted(hosts):
        on_change(HostChange(moid=moid, host=None, revision=INFERRED_REVISION))
