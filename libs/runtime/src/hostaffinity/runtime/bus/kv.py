"""Typed access to the `hostaffinity-topology` bucket, and the watch every service bootstraps from.

Values are the schema's `NodePlacement` (`node.<node-name>`) and `EsxiHost` (`host.<host-moid>`)
as msgspec JSON; the node-labeller also keeps there, under `outbox.node.<node-name>`, the events
of a node's stored change until it has published them (a list of events), which readers of
placements never see. A watch first replays the latest value of every key, then says `Bootstrapped`,
then follows live changes: a service is ready once it has seen `Bootstrapped`.
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Final, Self, TypeVar

import msgspec
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from hostaffinity.runtime.bus.deadletters import DeadLetterQueue
from hostaffinity.schema import (
    UNDECODABLE,
    EsxiHost,
    Event,
    NodePlacement,
    TopologyEvent,
    TopologySnapshot,
    Undecodable,
    host_key,
    node_key,
    node_outbox_key,
)
from hostaffinity.schema.names import HOST_KEY_PREFIX, NODE_KEY_PREFIX, NODE_OUTBOX_KEY_PREFIX

_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
_node_decoder = msgspec.json.Decoder(NodePlacement)
_host_decoder = msgspec.json.Decoder(EsxiHost)
_events_decoder = msgspec.json.Decoder(list[TopologyEvent])

_T = TypeVar("_T")


class NodeChange(msgspec.Struct, frozen=True, kw_only=True):
    """`node.<node>` was written; `placement` is None when the key was deleted."""

    node: str
    placement: NodePlacement | None
    revision: int


class HostChange(msgspec.Struct, frozen=True, kw_only=True):
    """`host.<moid>` was written; `host` is None when the key was deleted. `moid` is what
    follows `host.` (`<vcenter>.<moid>` where the labeller works with several vCenters)."""

    moid: str
    host: EsxiHost | None
    revision: int


class Bootstrapped(msgspec.Struct, frozen=True):
    """Every value the bucket held when the watch started has been yielded; live changes follow."""


TopologyChange = NodeChange | HostChange | Bootstrapped


def topology_change(entry: KeyValue.Entry) -> NodeChange | HostChange | None:
    """The typed change a bucket entry stands for; None for a key outside `node.>`/`host.>`.

    Raises one of UNDECODABLE when a value does not decode (msgspec's errors, invalid UTF-8 in a
    string, nesting deeper than the interpreter allows).
    """
    deleted = entry.operation in (KV_DEL, KV_PURGE)
    revision = entry.revision or 0
    if entry.key.startswith(NODE_KEY_PREFIX):
        placement = None if deleted else _node_decoder.decode(entry.value or b"")
        node = entry.key.removeprefix(NODE_KEY_PREFIX)
        return NodeChange(node=node, placement=placement, revision=revision)
    if entry.key.startswith(HOST_KEY_PREFIX):
        host = None if deleted else _host_decoder.decode(entry.value or b"")
        moid = entry.key.removeprefix(HOST_KEY_PREFIX)
        return HostChange(moid=moid, host=host, revision=revision)
    return None


class _BucketWatch:
    """nats-py's watch of the whole bucket, and where the values it held at the start end.

    nats-py marks the end of the initial values with a None, and sends that marker before any
    value when its consumer_info answer says nothing is pending while its reader has not yet read
    a delivery: the server answers the API request and delivers the consumer's messages from
    different goroutines, so the answer can reach the socket first (in a 2,000-node benchmark
    one snapshot missed every key). The marker is therefore ignored. Instead the stream's last
    sequence is read once the watch's consumer exists: the consumer delivers in stream order
    and that message (or a later write of its key; the bucket has no max age) always reaches
    it, so the initial values are done once an entry at or past that sequence arrives; an
    empty stream is done at once.
    """

    def __init__(self, watcher: KeyValue.KeyWatcher, initial_end: int) -> None:
        self._watcher = watcher
        self._initial_end: int | None = initial_end
        self._read_up_to = 0

    @classmethod
    async def start(cls, kv: KeyValue, *, inactive_threshold: float | None = None) -> Self:
        """`inactive_threshold`: how long the server keeps the consumer once nothing reads it
        (nats-py's default when None)."""
        watcher = await _watch_all(kv, inactive_threshold)
        try:
            initial_end = await last_revision(kv)
        except BaseException:
            await _stop(watcher)
            raise
        return cls(watcher, initial_end)

    @property
    def read_up_to(self) -> int:
        """The revision of the last entry read (0 before the first)."""
        return self._read_up_to

    async def next(self) -> KeyValue.Entry | Bootstrapped:
        """The next entry; `Bootstrapped` once, right after the last initial value."""
        if self._initial_end is not None and self._read_up_to >= self._initial_end:
            self._initial_end = None
            return Bootstrapped()
        while True:
            entry: KeyValue.Entry | None = await anext(self._watcher)
            if entry is not None:
                self._read_up_to = entry.revision or 0
                return entry

    async def stop(self) -> None:
        await _stop(self._watcher)


async def last_revision(kv: KeyValue) -> int:
    """The revision of the bucket's last entry (its stream's last sequence), 0 when empty; the
    stream leader answers, so a watch served by a lagging replica can be held against it."""
    state = (await kv.status()).stream_info.state
    return state.last_seq if state.messages else 0


async def current_entries(kv: KeyValue, prefix: str = "") -> list[KeyValue.Entry]:
    """The latest entry of every key of any bucket that starts with `prefix` and is not deleted
    or purged, read up to where the bucket ended when the read began: nats-py's own
    end-of-values marker can come before the values (see _BucketWatch), and a read that trusted
    it found an empty bucket."""
    entries: list[KeyValue.Entry] = []
    # A read a second would otherwise keep 300 consumers on the server, past the stream's cap.
    watch = await _BucketWatch.start(kv, inactive_threshold=ONE_SHOT_INACTIVE_SECONDS)
    try:
        while not isinstance(entry := await watch.next(), Bootstrapped):
            if entry.key.startswith(prefix) and entry.operation not in (KV_DEL, KV_PURGE):
                entries.append(entry)
    finally:
        await watch.stop()
    return entries


async def decoded_values(
    kv: KeyValue, prefix: str, decoder: msgspec.json.Decoder[_T], what: str
) -> list[_T]:
    """The values of `current_entries` decoded; one that does not decode is logged (naming its
    key and `what` it should be) and left out, so that a bad value never stops a whole read."""
    values: list[_T] = []
    for entry in await current_entries(kv, prefix):
        try:
            values.append(decoder.decode(entry.value or b""))
        except UNDECODABLE as err:
            _log.error("%s %s left out: %s", what, entry.key, err)
    return values


async def _watch_all(kv: KeyValue, inactive_threshold: float | None) -> KeyValue.KeyWatcher:
    """`kv.watchall()`, never abandoned half-made: nats-py unsubscribes a watch whose start
    failed only on an Exception, so a start cancelled while it awaited its consumer_info would
    leave the subscription, its consumer and its message task running for the life of the
    connection (one per cancelled start: a reconnect or a lost Lease cancels starts)."""
    starting = asyncio.ensure_future(kv.watchall(inactive_threshold=inactive_threshold))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await _stop(await starting)
        raise


# How long the server keeps a one-shot read's consumer once the read stopped it (nats-py's
# default for a watch is 5 minutes).
ONE_SHOT_INACTIVE_SECONDS: Final = 5.0
# Loop turns for a watch's message task to get past nats-py's wait for the watch's set-up.
_SETUP_TURNS = 3


async def _stop(watcher: KeyValue.KeyWatcher) -> None:
    """Stop a watch without leaving its message task running. nats-py's callback first awaits
    `asyncio.wait_for(init_setup)`, and Python 3.11's `wait_for` swallows a cancellation that
    arrives once its future is done but before the task ran again: a watch stopped in that
    window (just started, or its start cancelled) kept a `Subscription._wait_for_msgs` task
    pending for ever. The set-up is done when `watchall()` returns; a few loop turns let the
    task get past the wait, so the cancellation reaches it."""
    for _ in range(_SETUP_TURNS):
        await asyncio.sleep(0)
    await watcher.stop()  # type: ignore[no-untyped-call]


class TopologyWatch:
    """`async with store.watch() as changes: async for change in changes: ...`.

    A value that does not decode is logged, parked in the dead-letter queue (when the store has
    one) and skipped: one bad key must not stop a service.
    """

    def __init__(self, kv: KeyValue, dead_letters: DeadLetterQueue | None = None) -> None:
        self._kv = kv
        self._dead_letters = dead_letters
        self._watch: _BucketWatch | None = None

    async def __aenter__(self) -> Self:
        self._watch = await _BucketWatch.start(self._kv)
        return self

    @property
    def started(self) -> bool:
        return self._watch is not None

    @property
    def read_up_to(self) -> int:
        """The bucket revision this watch has delivered up to (0 before it started)."""
        return 0 if self._watch is None else self._watch.read_up_to

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._watch is not None:
            await self._watch.stop()
            self._watch = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> TopologyChange:
        if self._watch is None:
            raise RuntimeError("enter the watch with `async with` before iterating")
        while True:
            entry = await self._watch.next()
            if isinstance(entry, Bootstrapped):
                return entry
            try:
                change = topology_change(entry)
            except UNDECODABLE as err:
                _log.error("topology key %s skipped: %s", entry.key, err)
                await self._park(entry, f"undecodable value: {err}")
                continue
            if change is not None:
                return change

    async def _park(self, entry: KeyValue.Entry, reason: str) -> None:
        """Keep the bad value with its reason; a DLQ out of reach costs the copy, not the watch."""
        if self._dead_letters is None:
            return
        subject = f"$KV.{entry.bucket}.{entry.key}"
        try:
            await self._dead_letters.park_value(
                f"KV_{entry.bucket}", subject, entry.revision or 0, entry.value or b"", reason
            )
        except NatsError as error:
            _log.warning(
                "topology key %s not parked in the dead-letter queue: %r", entry.key, error
            )


def _apply(
    entry: KeyValue.Entry,
    nodes: dict[str, NodePlacement | Undecodable],
    hosts: dict[str, EsxiHost | Undecodable],
) -> None:
    """Fold one entry into a snapshot: the latest value wins, a delete removes the key."""
    try:
        change = topology_change(entry)
    except UNDECODABLE as err:
        if entry.key.startswith(NODE_KEY_PREFIX):
            nodes[entry.key.removeprefix(NODE_KEY_PREFIX)] = Undecodable(str(err))
        elif entry.key.startswith(HOST_KEY_PREFIX):
            hosts[entry.key.removeprefix(HOST_KEY_PREFIX)] = Undecodable(str(err))
        return
    if isinstance(change, NodeChange):
        if change.placement is None:
            nodes.pop(change.node, None)
        else:
            nodes[change.node] = change.placement
    elif isinstance(change, HostChange):
        if change.host is None:
            hosts.pop(change.moid, None)
        else:
            hosts[change.moid] = change.host


class TopologyStore:
    """Reads and writes of the topology bucket with the schema's types; a watch parks the values
    it cannot decode in `dead_letters` when given one."""

    def __init__(self, kv: KeyValue, dead_letters: DeadLetterQueue | None = None) -> None:
        self._kv = kv
        self._dead_letters = dead_letters

    async def put_node(self, placement: NodePlacement) -> int:
        """Store a node's placement; returns the new revision."""
        return await self._kv.put(node_key(placement.node), _encoder.encode(placement))

    async def get_node(self, node: str) -> NodePlacement | None:
        """The node's current placement, or None when it has none (never written or deleted)."""
        placement = await self._get(node_key(node), _node_decoder)
        return placement

    async def delete_node(self, node: str) -> None:
        """Mark the node's placement deleted; watchers see a NodeChange without placement."""
        await self._kv.delete(node_key(node))

    async def put_host(self, host: EsxiHost, host_id: str | None = None) -> int:
        """Store an ESXi host record under `host.<host_id>` (default: its moid, the one-vCenter
        layout; schema `host_id`); returns the new revision."""
        return await self._kv.put(host_key(host_id or host.moid), _encoder.encode(host))

    async def get_host(self, host_id: str) -> EsxiHost | None:
        """The record at `host.<host_id>`, or None when it has none (never written or deleted)."""
        host = await self._get(host_key(host_id), _host_decoder)
        return host

    async def delete_host(self, host_id: str) -> None:
        """Mark `host.<host_id>` deleted; watchers see a HostChange without host."""
        await self._kv.delete(host_key(host_id))

    async def keep_unpublished(self, node: str, events: Sequence[Event]) -> None:
        """Keep the node's events not yet published, before the change they describe is made."""
        await self._kv.put(node_outbox_key(node), _encoder.encode(list(events)))

    async def forget_unpublished(self, node: str) -> None:
        """The node's kept events were all published."""
        await self._kv.delete(node_outbox_key(node))

    async def unpublished(self) -> dict[str, list[TopologyEvent]]:
        """Every node's kept events (an earlier run stopped before publishing them); a value
        that does not decode is logged and left out (its change is planned again)."""
        kept: dict[str, list[TopologyEvent]] = {}
        for entry in await current_entries(self._kv, NODE_OUTBOX_KEY_PREFIX):
            node = entry.key.removeprefix(NODE_OUTBOX_KEY_PREFIX)
            try:
                kept[node] = _events_decoder.decode(entry.value or b"")
            except UNDECODABLE as err:
                _log.error("kept events of node %s do not decode; left out: %s", node, err)
        return kept

    async def snapshot(self) -> TopologySnapshot:
        """Every key's latest value, undecodable ones included; deleted keys are absent."""
        nodes: dict[str, NodePlacement | Undecodable] = {}
        hosts: dict[str, EsxiHost | Undecodable] = {}
        for entry in await current_entries(self._kv):
            _apply(entry, nodes, hosts)
        return TopologySnapshot(nodes=nodes, hosts=hosts)

    def watch(self) -> TopologyWatch:
        """All current values, then `Bootstrapped`, then live changes, including deletes."""
        return TopologyWatch(self._kv, self._dead_letters)

    async def last_revision(self) -> int:
        """The bucket's latest revision, as its stream leader knows it (0 when empty)."""
        return await last_revision(self._kv)

    async def _get(self, key: str, decoder: msgspec.json.Decoder[_T]) -> _T | None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return decoder.decode(entry.value or b"")
