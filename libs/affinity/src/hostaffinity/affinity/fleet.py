"""The fleet view read as an estate: which clusters' nodes sit on each ESXi host, which workloads
and fleet groups have replicas sharing a host (in one cluster or across clusters), and what
every cluster loses with one host. Pure: the view comes in as the `hostaffinity-fleet` bucket's
entries (keys `<install>.<key>`, names.fleet_key), from the hub or an install's mirror.

A host is known across clusters by `fleet_host_id` (vCenter instance UUID and moid, else its
name), so two installs that name one vCenter differently still meet on the same host.
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

import msgspec

from hostaffinity.schema import (
    EsxiHost,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_host_id,
)
from hostaffinity.schema.names import HOST_KEY_PREFIX, NODE_KEY_PREFIX, WORKLOAD_KEY_PREFIX


@dataclass
class FleetView:
    """Every install's placements and topology, by install token; `undecodable` names the keys
    whose value did not decode (skipped, said by the commands)."""

    workloads: dict[str, list[WorkloadPlacement]] = field(default_factory=dict)
    nodes: dict[str, list[NodePlacement]] = field(default_factory=dict)
    hosts: dict[str, list[EsxiHost]] = field(default_factory=dict)
    undecodable: list[str] = field(default_factory=list)

    def clusters(self) -> list[str]:
        return sorted(set(self.workloads) | set(self.nodes))


_WORKLOADS: Final = msgspec.json.Decoder(WorkloadPlacement)
_NODES: Final = msgspec.json.Decoder(NodePlacement)
_HOSTS: Final = msgspec.json.Decoder(EsxiHost)


def read_view(entries: Mapping[str, bytes]) -> FleetView:
    """The view from the bucket's live entries. The collector is paused meanwhile: an estate's
    view is hundreds of thousands of new objects, and its passes over a growing heap cost as much
    as decoding them (measured at 30,000 workloads, bench/README.md "Fleet")."""
    view = FleetView()
    with collector_paused():
        for key, value in entries.items():
            _read_entry(view, key, value)
    return view


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_entry(view: FleetView, key: str, value: bytes) -> None:
    install, _, own = key.partition(".")
    try:
        if own.startswith(WORKLOAD_KEY_PREFIX):
            view.workloads.setdefault(install, []).append(_WORKLOADS.decode(value))
        elif own.startswith(NODE_KEY_PREFIX):
            view.nodes.setdefault(install, []).append(_NODES.decode(value))
        elif own.startswith(HOST_KEY_PREFIX):
            view.hosts.setdefault(install, []).append(_HOSTS.decode(value))
    except msgspec.DecodeError:
        view.undecodable.append(key)


def node_host_id(node: NodePlacement) -> str:
    return fleet_host_id(node.vcenter_uuid, node.host_moid, node.host_name)


@dataclass(frozen=True)
class HostRow:
    """One ESXi host and the nodes each cluster has on it."""

    host_id: str
    host_name: str
    nodes: dict[str, list[str]]


def topology(view: FleetView) -> list[HostRow]:
    """Hosts by clusters by nodes, hosts by name."""
    names: dict[str, str] = {}
    by_host: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for install, nodes in view.nodes.items():
        for node in nodes:
            host = node_host_id(node)
            names[host] = node.host_name
            by_host[host][install].append(node.node)
    return sorted(
        (
            HostRow(host, names[host], {c: sorted(n) for c, n in sorted(clusters.items())})
            for host, clusters in by_host.items()
        ),
        key=lambda row: (row.host_name, row.host_id),
    )


@dataclass(frozen=True)
class Replica:
    cluster: str
    workload: str  # <namespace>/<kind>/<name>
    pod: str


@dataclass(frozen=True)
class Exposure:
    """Replicas of one workload, or of one fleet group, that share a host: one host failure
    takes all of them. `group` is the fleet group ("" for a workload's own replicas)."""

    host_id: str
    host_name: str
    group: str
    replicas: tuple[Replica, ...]

    @property
    def clusters(self) -> list[str]:
        return sorted({replica.cluster for replica in self.replicas})

    @property
    def subject(self) -> str:
        """What is exposed: `fleet group G` or `<cluster>:<namespace>/<kind>/<name>`."""
        if self.group:
            return f"fleet group {self.group}"
        first = self.replicas[0]
        return f"{first.cluster}:{first.workload}"


def _workload_name(workload: WorkloadPlacement) -> str:
    return f"{workload.namespace}/{workload.kind}/{workload.name}"


def exposure(view: FleetView) -> list[Exposure]:
    """Each workload with two or more replicas on one host, and each fleet group with two or
    more replicas (of any workloads, in any clusters) on one host.

    Counted first, replicas named only for what is exposed: at estate scale (30,000 workloads,
    300,000 replicas) most replicas share a host with nothing of theirs."""
    found = []
    grouped: dict[str, list[tuple[str, WorkloadPlacement]]] = defaultdict(list)
    for install, workloads in sorted(view.workloads.items()):
        for workload in workloads:
            hosts = [replica.host_id for replica in workload.replicas if replica.host_id]
            if workload.fleet_group:
                grouped[workload.fleet_group].append((install, workload))
            if len(hosts) == len(set(hosts)):
                continue
            for host in {h for h in hosts if hosts.count(h) > 1}:
                found.append(_exposed(host, "", [(install, workload)]))
    for group, members in grouped.items():
        on_host: dict[str, list[tuple[str, WorkloadPlacement, ReplicaPlacement]]] = defaultdict(
            list
        )
        for install, workload in members:
            for replica in workload.replicas:
                if replica.host_id:
                    on_host[replica.host_id].append((install, workload, replica))
        for host, placed in on_host.items():
            if len(placed) > 1:
                replicas = tuple(Replica(i, _workload_name(w), r.pod) for i, w, r in placed)
                found.append(Exposure(host, placed[0][2].host_name, group, replicas))
    return sorted(found, key=lambda e: (e.group == "", e.subject, e.host_name, e.host_id))


def _exposed(host: str, group: str, members: list[tuple[str, WorkloadPlacement]]) -> Exposure:
    """The replicas of `members` on `host`, named."""
    replicas = []
    name = ""
    for install, workload in members:
        for replica in workload.replicas:
            if replica.host_id == host:
                name = replica.host_name
                replicas.append(Replica(install, _workload_name(workload), replica.pod))
    return Exposure(host, name, group, tuple(replicas))


def find_host(view: FleetView, wanted: str) -> str | None:
    """The host id `wanted` names: an id, a host name, or its short name."""
    for row in topology(view):
        if wanted in (row.host_id, row.host_name, row.host_name.split(".")[0]):
            return row.host_id
    return None


@dataclass(frozen=True)
class ClusterLoss:
    """What one cluster loses with a host: its nodes there and, per workload with replicas
    there, how many of how many (`down`: all of them)."""

    cluster: str
    nodes: tuple[str, ...]
    workloads: tuple[tuple[str, int, int], ...]
    groups: tuple[str, ...]

    @property
    def down(self) -> list[str]:
        return [name for name, lost, total in self.workloads if lost == total]


def losses(view: FleetView, host_id: str) -> list[ClusterLoss]:
    """Every cluster's loss when `host_id` goes (a failure), or must be emptied (maintenance)."""
    found = []
    for cluster in view.clusters():
        nodes = sorted(n.node for n in view.nodes.get(cluster, ()) if node_host_id(n) == host_id)
        hit: list[tuple[str, int, int]] = []
        groups: set[str] = set()
        for workload in view.workloads.get(cluster, ()):
            lost = sum(1 for replica in workload.replicas if replica.host_id == host_id)
            if lost:
                hit.append((_workload_name(workload), lost, len(workload.replicas)))
                if workload.fleet_group:
                    groups.add(workload.fleet_group)
        if nodes or hit:
            found.append(
                ClusterLoss(cluster, tuple(nodes), tuple(sorted(hit)), tuple(sorted(groups)))
            )
    return found


def exposed_replicas(exposures: Iterable[Exposure]) -> dict[tuple[str, str], int]:
    """Per (cluster, kind of exposure: `workload` or `fleet-group`), the replicas exposed: what
    the fleet exposure gauge reports."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for found in exposures:
        kind = "fleet-group" if found.group else "workload"
        for replica in found.replicas:
            counts[(replica.cluster, kind)] += 1
    return dict(counts)
