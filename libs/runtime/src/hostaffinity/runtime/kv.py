"""Typed access to the `hostaffinity-topology` bucket, and the watch every service bootstraps from.

Values are the schema's `NodePlacement` (`node.<node-name>`) and `EsxiHost` (`host.<host-moid>`)
as msgspec JSON. A watch first replays the latest value of every key, then says `Bootstrapped`,
then follows live changes: a service is ready once it has seen `Bootstrapped`.
"""

import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self, TypeVar

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from hostaffinity.schema import EsxiHost, NodePlacement, host_key, node_key
from hostaffinity.schema.names import HOST_KEY_PREFIX, NODE_KEY_PREFIX

_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
_node_decoder = msgspec.json.Decoder(NodePlacement)
_host_decoder = msgspec.json.Decoder(EsxiHost)

_T = TypeVar("_T")


class NodeChange(msgspec.Struct, frozen=True, kw_only=True):
    """`node.<node>` was written; `placement` is None when the key was deleted."""

    node: str
    placement: NodePlacement | None
    revision: int


class HostChange(msgspec.Struct, frozen=True, kw_only=True):
    """`host.<moid>` was written; `host` is None when the key was deleted."""

    moid: str
    host: EsxiHost | None
    revision: int


class Bootstrapped(msgspec.Struct, frozen=True):
    """Every value the bucket held when the watch started has been yielded; live changes follow."""


TopologyChange = NodeChange | HostChange | Bootstrapped


class Undecodable(msgspec.Struct, frozen=True):
    """A value under a topology key that is not the schema's type (garbage, wrong types)."""

    reason: str


class TopologySnapshot(msgspec.Struct, frozen=True):
    """The latest value of every live key: what a resync compares with what it last wrote."""

    nodes: dict[str, NodePlacement | Undecodable]
    hosts: dict[str, EsxiHost | Undecodable]


def topology_change(entry: KeyValue.Entry) -> NodeChange | HostChange | None:
    """The typed change a bucket entry stands for; None for a key outside `node.>`/`host.>`.

    Raises msgspec.DecodeError (or its ValidationError) when a value does not decode.
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


class TopologyWatch:
    """`async with store.watch() as changes: async for change in changes: ...`.

    A value that does not decode is logged and skipped: one bad key must not stop a service.
    """

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        self._watcher: KeyValue.KeyWatcher | None = None

    async def __aenter__(self) -> Self:
        self._watcher = await self._kv.watchall()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._watcher is not None:
            await self._watcher.stop()  # type: ignore[no-untyped-call]
            self._watcher = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> TopologyChange:
        if self._watcher is None:
            raise RuntimeError("enter the watch with `async with` before iterating")
        while True:
            # nats-py yields None once, when the initial values are done.
            entry: KeyValue.Entry | None = await anext(self._watcher)
            if entry is None:
                return Bootstrapped()
            try:
                change = topology_change(entry)
            except msgspec.DecodeError as err:
                _log.error("topology key %s skipped: %s", entry.key, err)
                continue
            if change is not None:
                return change


async def _latest_values(
    kv: KeyValue, watcher: KeyValue.KeyWatcher
) -> AsyncIterator[KeyValue.Entry]:
    """The watch's initial values, all of them, then stop.

    nats-py marks the end of the initial values with None, and also sends that marker before
    any value when its consumer_info says nothing is pending while its reader has not yet read
    a message (the server's delivery and its consumer_info answer race); in a 2,000-node
    benchmark one resync's snapshot missed every key. So the end is the entry with nothing
    pending after it (`delta == 0`), and a None ends only an empty bucket.
    """
    while True:
        entry: KeyValue.Entry | None = await anext(watcher)
        if entry is None:
            if (await kv.status()).values == 0:
                return
            continue
        yield entry
        if entry.delta == 0:
            return


class TopologyStore:
    """Reads and writes of the topology bucket with the schema's types."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

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

    async def put_host(self, host: EsxiHost) -> int:
        """Store an ESXi host record; returns the new revision."""
        return await self._kv.put(host_key(host.moid), _encoder.encode(host))

    async def get_host(self, moid: str) -> EsxiHost | None:
        """The host's current record, or None when it has none (never written or deleted)."""
        host = await self._get(host_key(moid), _host_decoder)
        return host

    async def delete_host(self, moid: str) -> None:
        """Mark the host deleted; watchers see a HostChange without host."""
        await self._kv.delete(host_key(moid))

    async def snapshot(self) -> TopologySnapshot:
        """Every key's latest value, undecodable ones included; deleted keys are absent."""
        nodes: dict[str, NodePlacement | Undecodable] = {}
        hosts: dict[str, EsxiHost | Undecodable] = {}
        watcher = await self._kv.watchall()
        try:
            async for entry in _latest_values(self._kv, watcher):
                key = entry.key
                try:
                    change = topology_change(entry)
                except msgspec.DecodeError as err:
                    bad = Undecodable(str(err))
                    if key.startswith(NODE_KEY_PREFIX):
                        nodes[key.removeprefix(NODE_KEY_PREFIX)] = bad
                    elif key.startswith(HOST_KEY_PREFIX):
                        hosts[key.removeprefix(HOST_KEY_PREFIX)] = bad
                    continue
                if isinstance(change, NodeChange) and change.placement is not None:
                    nodes[change.node] = change.placement
                elif isinstance(change, HostChange) and change.host is not None:
                    hosts[change.moid] = change.host
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return TopologySnapshot(nodes=nodes, hosts=hosts)

    def watch(self) -> TopologyWatch:
        """All current values, then `Bootstrapped`, then live changes, including deletes."""
        return TopologyWatch(self._kv)

    async def _get(self, key: str, decoder: msgspec.json.Decoder[_T]) -> _T | None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return decoder.decode(entry.value or b"")
