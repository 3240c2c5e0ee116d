"""The planner's vocabulary: its settings, the node VMs and hosts it plans over, and the plan.

Shared by the steps of `planner.py` (the VM graph, VM-VM rules, VM-Host rules) and by the shell
that applies and reports a plan; it holds values and small reads of them, no planning.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.drs_translator.core.rules import ConflictReason, DrsObject
from hostaffinity.schema import EsxiHost, NodePlacement

CONNECTED: Final = "connected"


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    vcenter: str
    # This install's token (drs_names.install_token of the cluster identity): it names every
    # rule and group, so that installs sharing the vCenter never name one alike.
    install: str
    # VM-Host rules as "must" (DRS and HA never break them) instead of "should".
    vm_host_mandatory: bool = False
    # Translate preferred host anti-affinity and preferred host node affinity too (the latter as
    # "should"); preferred pod affinity never.
    translate_preferred: bool = False


@dataclass(frozen=True, slots=True)
class Conflict:
    """A rule DRS could not satisfy: reported, not sent."""

    cluster_moid: str
    name: str
    reason: ConflictReason
    message: str
    vms: tuple[str, ...]
    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """A pod whose host-level term DRS cannot express exactly."""

    cluster_moid: str
    pod: str
    message: str


@dataclass(slots=True)
class ClusterPlan:
    """Desired rules and groups of one cluster; `held` names are left as vCenter has them."""

    cluster_moid: str
    objects: dict[str, DrsObject] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    # Rules sent disabled while hosts are in or entering maintenance: name → those hosts' moids.
    maintenance_holds: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class Plan:
    clusters: dict[str, ClusterPlan] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    untranslatable: list[Untranslatable] = field(default_factory=list)

    def cluster(self, moid: str) -> ClusterPlan:
        return self.clusters.setdefault(moid, ClusterPlan(moid))


@dataclass(frozen=True, slots=True)
class Vm:
    moid: str
    cluster: str


class NodeVms:
    """Node → VM for the nodes of one vCenter."""

    def __init__(self, placements: Mapping[str, NodePlacement], vcenter: str) -> None:
        self._vm = {
            node: Vm(p.vm_moid, p.cluster_moid)
            for node, p in placements.items()
            if p.vcenter == vcenter and p.cluster_moid
        }
        self._nodes_of: dict[str, list[str]] = {}
        for node, vm in self._vm.items():
            self._nodes_of.setdefault(vm.cluster, []).append(node)

    def __call__(self, node: str) -> Vm | None:
        return self._vm.get(node)

    def clusters_with_pods(self, index: ClusterIndex) -> set[str]:
        """The clusters of our VMs that carry at least one indexed pod (each cluster's nodes are
        looked at until one has a pod: one or two per cluster in a busy one)."""
        return {
            cluster
            for cluster, nodes in self._nodes_of.items()
            if any(next(index.pods_on(node), None) is not None for node in nodes)
        }


def is_away(host: EsxiHost) -> bool:
    """In maintenance mode or on the way in: DRS places nothing there."""
    return host.in_maintenance_mode or host.entering_maintenance


@dataclass(frozen=True, slots=True)
class ClusterHosts:
    """A cluster's connected hosts: how many DRS may use, and which are (entering) maintenance."""

    usable: int
    away: tuple[str, ...]

    @classmethod
    def of(cls, hosts: Mapping[str, EsxiHost], cluster: str) -> "ClusterHosts":
        connected = [
            h
            for h in hosts.values()
            if h.cluster_moid == cluster and h.connection_state == CONNECTED
        ]
        away = tuple(sorted(h.moid for h in connected if is_away(h)))
        return cls(len(connected) - len(away), away)

    def hold_reason(self, what: str) -> str:
        return (
            f"held so that hosts {', '.join(self.away)} can enter maintenance mode: {what}; "
            "restored when they are back or other hosts make room"
        )
