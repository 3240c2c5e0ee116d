"""Reading a ClusterSnapshot: the API through the runtime's informer (paged lists of raw JSON
into msgspec structs), the topology KV through its watch, the drs-translator's ownership records
and the vSphere HA settings it keeps beside them.

Progress goes to stderr, one line per source, because a 150,000-pod list takes a while on a real
API server. Nothing is written anywhere.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sized
from typing import Any, Final, NamedTuple, TextIO, TypeVar

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException
from nats.js.errors import BucketNotFoundError

from hostaffinity.affinity.model import (
    Node,
    ObjectMeta,
    Pod,
    decode_namespace,
    decode_node,
    decode_pod,
)
from hostaffinity.affinity.resources import Resources, node_allocatable, pod_requests
from hostaffinity.affinity.workloads import WorkloadRef
from hostaffinity.cli.connections import open_api, open_bus
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import Bootstrapped, HostChange, NodeChange, current_entries
from hostaffinity.runtime.kube.client import NAMESPACES, NODES, PODS, KubeClient, ResourceRef
from hostaffinity.runtime.kube.informer import Informer, InformerEvent
from hostaffinity.runtime.process.config import KubernetesSettings, NatsSettings
from hostaffinity.schema import (
    DRS_BUCKET,
    ClusterHaSettings,
    DrsClusterReport,
    DrsOwnership,
    EsxiHost,
    NodePlacement,
)
from hostaffinity.schema.names import DRS_HA_KEY_PREFIX, DRS_REPORT_KEY_PREFIX, DRS_RULE_KEY_PREFIX

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
S = TypeVar("S", bound=Sized)
VMIS: Final = ResourceRef("kubevirt.io", "v1", "virtualmachineinstances")
_DRS_DECODER: Final = msgspec.json.Decoder(DrsOwnership)
_HA_DECODER: Final = msgspec.json.Decoder(ClusterHaSettings)
_REPORT_DECODER: Final = msgspec.json.Decoder(DrsClusterReport)


class Progress:
    """`reading pods ... 150000 in 4.2 s` lines on stderr."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream  # None: whatever sys.stderr is when a line is written

    async def counted(self, what: str, reading: Awaitable[S]) -> S:
        """Await one read and say what it returned, once done: a read that fails leaves no
        half-written line before the command's one line of failure."""
        started = time.perf_counter()
        result = await reading
        elapsed = time.perf_counter() - started
        print(
            f"reading {what} ... {len(result)} in {elapsed:.1f} s",
            file=self._stream or sys.stderr,
            flush=True,
        )
        return result


class _Vmi(msgspec.Struct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class _VmiList(msgspec.Struct, frozen=True):
    items: list[_Vmi] = msgspec.field(default_factory=list)


async def _ignore(_event: InformerEvent[Any]) -> None:
    """The snapshot reads the informer's cache once; it needs no per-event handling."""


async def list_objects(
    client: KubeClient, resource: ResourceRef, decode: Callable[[bytes], T]
) -> dict[str, T]:
    """Every object of a resource, by `namespace/name`: the informer's paged list, no watch."""
    informer: Informer[T] = Informer(client, resource, _ignore, decode)
    return dict(await informer.list_once())


def _pod_with_requests(raw: bytes) -> tuple[Pod, Resources]:
    return decode_pod(raw), pod_requests(raw)


def _with_allocatable(raw: bytes) -> tuple[Node, Resources]:
    return decode_node(raw), node_allocatable(raw)


async def vmi_owners(client: KubeClient) -> dict[tuple[str, str], WorkloadRef]:
    """(namespace, VMI) -> its controller; empty where KubeVirt is not installed."""
    try:
        body = await client.request("GET", VMIS.path())
    except ApiException as error:
        if error.status in (403, 404):
            return {}
        raise
    owners = {}
    for vmi in msgspec.json.decode(body, type=_VmiList).items:
        meta = vmi.metadata
        for ref in meta.owner_references:
            if ref.controller:
                owners[(meta.namespace, meta.name)] = WorkloadRef(
                    ref.kind, meta.namespace, ref.name
                )
    return owners


async def read_api(client: KubeClient, snapshot: ClusterSnapshot, progress: Progress) -> None:
    """Nodes, pods, namespaces and KubeVirt VMIs into the snapshot."""
    nodes = await progress.counted("nodes", list_objects(client, NODES, _with_allocatable))
    snapshot.nodes, snapshot.allocatable = _split(nodes)
    snapshot.namespaces = await progress.counted(
        "namespaces", list_objects(client, NAMESPACES, decode_namespace)
    )
    pods = await progress.counted("pods", list_objects(client, PODS, _pod_with_requests))
    snapshot.pods, snapshot.requests = _split(pods)
    snapshot.vmi_owners = await progress.counted("KubeVirt VMIs", vmi_owners(client))


def _split(pairs: Mapping[str, tuple[A, B]]) -> tuple[dict[str, A], dict[str, B]]:
    return {k: a for k, (a, _) in pairs.items()}, {k: b for k, (_, b) in pairs.items()}


async def read_bus(bus: Bus, snapshot: ClusterSnapshot, progress: Progress) -> None:
    """Placements and hosts from the topology KV; DRS ownership records when the bucket exists."""
    snapshot.placements, snapshot.hosts = await progress.counted("topology KV", _topology(bus))
    snapshot.drs_records = await progress.counted("DRS ownership records", drs_records(bus))
    snapshot.ha_settings = await progress.counted("vSphere HA settings", ha_settings(bus))
    snapshot.drs_reports = await progress.counted("DRS cluster reports", drs_reports(bus))


class _Topology(NamedTuple):
    placements: dict[str, NodePlacement]
    hosts: dict[str, EsxiHost]

    def __len__(self) -> int:  # what the progress line counts: KV entries
        return len(self.placements) + len(self.hosts)


async def _topology(bus: Bus) -> _Topology:
    topology = _Topology({}, {})
    async with (await bus.topology()).watch() as changes:
        async for change in changes:
            if isinstance(change, Bootstrapped):
                break
            if isinstance(change, NodeChange) and change.placement is not None:
                topology.placements[change.node] = change.placement
            elif isinstance(change, HostChange) and change.host is not None:
                topology.hosts[change.moid] = change.host
    return topology


async def drs_records(bus: Bus) -> list[DrsOwnership]:
    """The drs-translator's ownership records; one that does not decode is reported and skipped."""
    return await _drs_bucket_values(bus, DRS_RULE_KEY_PREFIX, _DRS_DECODER, "DRS record")


async def ha_settings(bus: Bus) -> dict[tuple[str, str], ClusterHaSettings]:
    """vSphere HA settings by (vCenter, cluster moid), as the drs-translator last read them."""
    found = await _drs_bucket_values(bus, DRS_HA_KEY_PREFIX, _HA_DECODER, "HA settings")
    return {(settings.vcenter, settings.cluster_moid): settings for settings in found}


async def drs_reports(bus: Bus) -> list[DrsClusterReport]:
    """What the drs-translator found needing attention, per vSphere cluster."""
    return await _drs_bucket_values(bus, DRS_REPORT_KEY_PREFIX, _REPORT_DECODER, "DRS report")


async def _drs_bucket_values(
    bus: Bus, prefix: str, decoder: msgspec.json.Decoder[T], what: str
) -> list[T]:
    """The values of one key family of `hostaffinity-drs` (none when the bucket is missing)."""
    try:
        kv = await bus.js.key_value(DRS_BUCKET)
    except BucketNotFoundError:
        return []
    values: list[T] = []
    for entry in await current_entries(kv, prefix):
        try:
            values.append(decoder.decode(entry.value or b""))
        except msgspec.DecodeError as error:
            print(f"{what} {entry.key} skipped: {error}", file=sys.stderr)
    return values


async def read_snapshot(
    kubernetes: KubernetesSettings, nats: NatsSettings, progress: Progress
) -> ClusterSnapshot:
    """The whole snapshot: the bus first (small), then the API. Both are opened (the
    kubeconfig checked and the API probed first: that is the quicker to say) before either is
    read, so a missing one is the only line a failure prints."""
    snapshot = ClusterSnapshot()
    async with open_api(kubernetes, probe=NODES) as client, open_bus(nats) as bus:
        await read_bus(bus, snapshot, progress)
        await read_api(client, snapshot, progress)
    return snapshot
