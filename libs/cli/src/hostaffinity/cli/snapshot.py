"""One read of the cluster and the bus that the operator commands answer from.

Kept apart from the reading (reading.py) so the commands are pure functions of a snapshot: the
tests and the benchmark build snapshots directly, and one snapshot feeds the engine's index the
way the services' informers do.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace, Node, Pod
from hostaffinity.affinity.resources import Resources
from hostaffinity.affinity.shared_hosts import shared_hosts_warnings
from hostaffinity.affinity.workloads import WorkloadRef
from hostaffinity.schema import (
    ClusterHaSettings,
    DrsClusterReport,
    DrsOwnership,
    EsxiHost,
    NodePlacement,
    SharedHostsWarning,
)


@dataclass
class ClusterSnapshot:
    """Nodes, pods and namespaces from the API; placements and hosts from the topology KV.

    `requests` (per pod key) and `allocatable` (per node) are the resource figures the API
    objects carry; `vmi_owners` maps (namespace, VMI name) to the VMI's controller;
    `drs_records` are the drs-translator's ownership records, `ha_settings` the vSphere HA
    settings it read of their clusters, by (vCenter, cluster moid), `drs_reports` what it found
    needing attention in each vSphere cluster.
    """

    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    requests: dict[str, Resources] = field(default_factory=dict)
    allocatable: dict[str, Resources] = field(default_factory=dict)
    placements: dict[str, NodePlacement] = field(default_factory=dict)
    hosts: dict[str, EsxiHost] = field(default_factory=dict)
    vmi_owners: dict[tuple[str, str], WorkloadRef] = field(default_factory=dict)
    drs_records: list[DrsOwnership] = field(default_factory=list)
    ha_settings: dict[tuple[str, str], ClusterHaSettings] = field(default_factory=dict)
    drs_reports: list[DrsClusterReport] = field(default_factory=list)

    @cached_property
    def hosts_by_vcenter(self) -> dict[tuple[str, str], EsxiHost]:
        """The host records by (vCenter, moid): their KV keys differ in layout with one or
        several vCenters, and moids repeat across vCenters; the records name both. A record
        written before records named their vCenter (the node-labeller rewrites it at its next
        resync) is taken as the placements' vCenter when they name only one."""
        named = {p.vcenter for p in self.placements.values()}
        only = next(iter(named)) if len(named) == 1 else ""
        return {(host.vcenter or only, host.moid): host for host in self.hosts.values()}

    @cached_property
    def drs_pods(self) -> frozenset[str]:
        """The pods (`namespace/name`) a record names that is not being removed."""
        return frozenset(
            pod for record in self.drs_records if record.state != "removing" for pod in record.pods
        )


def other_installs_on(
    snapshot: ClusterSnapshot, hosts: Collection[tuple[str, str]], also_away: bool
) -> list[SharedHostsWarning]:
    """What other installs' rules, in the vSphere clusters of `hosts` ((vCenter, moid) pairs), do
    to those clusters' hosts; with `also_away` those hosts count as entering maintenance."""
    named = [h for key, h in snapshot.hosts_by_vcenter.items() if key in hosts]
    warnings = []
    for report in snapshot.drs_reports:
        of_cluster = [
            h
            for (vcenter, _), h in snapshot.hosts_by_vcenter.items()
            if vcenter == report.vcenter and h.cluster_moid == report.cluster_moid
        ]
        if not any(h in of_cluster for h in named):
            continue
        away = {h.name for h in named if h in of_cluster} if also_away else set()
        warnings += shared_hosts_warnings(report.other_installs, of_cluster, also_away=away)
    return warnings


@dataclass(frozen=True)
class EngineOptions:
    """The shared settings that change the engine's answers (SharedSettings in the services)."""

    physical_anti_affinity: PhysicalAntiAffinity = "opt-in"
    unknown_placement: str = "fail"  # fail | pass


def build_engine(snapshot: ClusterSnapshot, options: EngineOptions) -> AffinityEngine:
    """The engine over an index fed from the snapshot, as the extender's feeds fill its cache."""
    index = ClusterIndex(physical_anti_affinity=options.physical_anti_affinity)
    for namespace in snapshot.namespaces.values():
        index.upsert_namespace(namespace)
    for node in snapshot.nodes.values():
        index.upsert_node(node)
    for name, placement in snapshot.placements.items():
        if name in snapshot.nodes:
            index.set_placement(name, placement.host_label)
    for pod in snapshot.pods.values():
        index.upsert_pod(pod)
    return AffinityEngine(index, fail_unplaced=options.unknown_placement == "fail")
