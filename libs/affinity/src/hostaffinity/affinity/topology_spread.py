"""Topology spread constraints: compiled once per pod, with their defaults and physical reading.

Semantics: kubernetes pkg/scheduler/framework/plugins/podtopologyspread/common.go
(filterTopologySpreadConstraints, mergeLabelSetWithSelector) and plugin.go
(systemDefaultConstraints) at v1.36. A null `minDomains` is 1, a null `nodeAffinityPolicy` is
Honor, a null `nodeTaintsPolicy` Ignore; `matchLabelKeys` adds `key In [the pod's value]` for
each key the pod carries (a null `labelSelector` stays a selector of nothing).

The physical reading: with the opt-in (pod annotation or cluster-wide), a `kubernetes.io/hostname`
spread is compiled as a spread over ESXi hosts, exactly as interpod.py reads a hostname
anti-affinity term: spreading replicas over VMs that share one host is not what the user asked for.
A KubeVirt migration target's spread read so leaves its own VM out (`kubevirt.io/created-by NotIn
[its VMI's uid]`), as the admission webhook writes it: the source pod it replaces is leaving, so it
does not count against its own host, and the target then does not count itself either
(filtering.go's selfMatchNum is 0 for a pod its own selector does not match).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Set
from typing import TYPE_CHECKING, Final

import msgspec

from hostaffinity.affinity.interpod import (
    HOST_KEYS,
    HOSTNAME_KEY,
    NamespaceScope,
    PhysicalAntiAffinity,
    migration_target,
    physical_opt_in,
    without_own_vm,
)
from hostaffinity.affinity.model import LabelSelector, Pod, TopologySpreadConstraint
from hostaffinity.affinity.nodeaffinity import required_node_affinity, required_nodes
from hostaffinity.affinity.selectors import (
    EVERYTHING,
    IN,
    Requirement,
    Selector,
    compile_label_selector,
    selector_from_map,
)
from hostaffinity.affinity.sharing import Interner
from hostaffinity.affinity.taints import first_untolerated
from hostaffinity.schema.names import LABEL_ESXI_HOST

if TYPE_CHECKING:  # the index keeps each pod's compiled spreads, so it imports this module
    from hostaffinity.affinity.index import ClusterIndex, PodRecord

DO_NOT_SCHEDULE: Final = "DoNotSchedule"
SCHEDULE_ANYWAY: Final = "ScheduleAnyway"
HONOR: Final = "Honor"
IGNORE: Final = "Ignore"
ZONE_KEY: Final = "topology.kubernetes.io/zone"


class SpreadConstraint(msgspec.Struct, frozen=True, gc=False):
    """One compiled topology spread constraint.

    `topology_key` is the effective key (the ESXi-host key for an opted-in pod's hostname
    spread); `declared_key` the key as written. `selector` already holds the matchLabelKeys.
    """

    max_skew: int
    topology_key: str
    selector: Selector
    when_unsatisfiable: str
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE
    declared_key: str = ""

    @property
    def hard(self) -> bool:
        """A DoNotSchedule constraint: the filter enforces it; ScheduleAnyway only scores."""
        return self.when_unsatisfiable == DO_NOT_SCHEDULE

    @property
    def soft(self) -> bool:
        return self.when_unsatisfiable == SCHEDULE_ANYWAY

    @property
    def physical(self) -> bool:
        """Whether the spread's domain is the ESXi host (the extender decides these)."""
        return self.topology_key in HOST_KEYS

    @property
    def honors_node_affinity(self) -> bool:
        return self.node_affinity_policy == HONOR

    @property
    def honors_taints(self) -> bool:
        return self.node_taints_policy == HONOR

    def describe(self) -> str:
        """Human form: selector, key (and how it was read), maxSkew, action."""
        key = self.topology_key
        if self.declared_key and self.declared_key != key:
            key = f"{key} (physical reading of {self.declared_key})"
        extra = f", minDomains {self.min_domains}" if self.min_domains != 1 else ""
        return (
            f"{self.selector.describe()} over {key}, maxSkew {self.max_skew}{extra}, "
            f"{self.when_unsatisfiable}"
        )


# Replicas compile equal spreads: the index keeps one tuple per workload, not one per pod.
Spreads = tuple[SpreadConstraint, ...]
_SHARED_SPREADS: Final[Interner[Spreads, Spreads]] = Interner()


def merge_label_keys(
    selector: Selector, keys: list[str] | None, labels: Mapping[str, str]
) -> Selector:
    """The selector plus `key In [value]` for each of `keys` the pod carries
    (common.go mergeLabelSetWithSelector: a selector of nothing stays one)."""
    added = [
        Requirement(key, IN, frozenset((labels[key],)))
        for key in dict.fromkeys(keys or ())
        if key in labels
    ]
    if not added or selector.nothing:
        return selector
    merged = sorted((*added, *selector.requirements), key=lambda r: r.key)
    return Selector(tuple(merged))


def compile_constraint(
    pod: Pod, constraint: TopologySpreadConstraint, physical: bool
) -> SpreadConstraint:
    """One constraint with the scheduler's defaults; `physical` reads hostname as the host key."""
    key, written = constraint.topology_key, constraint.label_selector
    if physical and key == HOSTNAME_KEY:
        key = LABEL_ESXI_HOST
        if migration_target(pod):
            written = without_own_vm(pod, written)
    selector = merge_label_keys(
        compile_label_selector(written),
        constraint.match_label_keys,
        pod.metadata.labels,
    )
    return SpreadConstraint(
        max_skew=constraint.max_skew,
        topology_key=key,
        selector=selector,
        when_unsatisfiable=constraint.when_unsatisfiable,
        min_domains=1 if constraint.min_domains is None else constraint.min_domains,
        node_affinity_policy=constraint.node_affinity_policy or HONOR,
        node_taints_policy=constraint.node_taints_policy or IGNORE,
        declared_key=constraint.topology_key,
    )


def compile_spread_constraints(
    pod: Pod, physical_anti_affinity: PhysicalAntiAffinity = "opt-in"
) -> tuple[SpreadConstraint, ...]:
    """Compile a pod's `topologySpreadConstraints`, in the order written.

    `physical_anti_affinity` is the shared setting: with "opt-in" the pod annotation
    (`hostaffinity.io/physical-anti-affinity: "true"`) opts in one pod. Opted in, a
    `kubernetes.io/hostname` constraint is compiled on `hostaffinity.io/esxi-host`. Equal
    constraints (a workload's replicas) come back as one shared, immutable tuple.
    """
    written = pod.spec.topology_spread_constraints
    if not written:
        return ()
    physical = physical_opt_in(pod, physical_anti_affinity)
    compiled = tuple(compile_constraint(pod, c, physical) for c in written)
    return _SHARED_SPREADS.share(compiled, compiled)


# plugin.go systemDefaultConstraints: the default profile's spreading for pods without their own.
SYSTEM_DEFAULT_CONSTRAINTS: Final = (
    TopologySpreadConstraint(
        max_skew=3, topology_key=HOSTNAME_KEY, when_unsatisfiable=SCHEDULE_ANYWAY
    ),
    TopologySpreadConstraint(max_skew=5, topology_key=ZONE_KEY, when_unsatisfiable=SCHEDULE_ANYWAY),
)


def _no_workload_selector(pod: Pod) -> Selector:
    return EVERYTHING


class SpreadDefaults(msgspec.Struct, frozen=True):
    """The profile's default constraints, for pods that declare none (PodTopologySpreadArgs).

    kube-scheduler's default profile uses the system defaults, with a selector built from the
    Services, ReplicationControllers, ReplicaSets and StatefulSets that select the pod
    (`default_selector`). The engine watches none of those objects, so by default `selector_of`
    finds none and -- as kube-scheduler does for a pod nothing selects -- no default applies. A
    caller that knows the workloads passes a `selector_of` built with `default_selector`.
    `system_defaulted` keeps kube-scheduler's rule that system defaults do not need nodes to
    carry every topology key to be scored.
    """

    constraints: tuple[TopologySpreadConstraint, ...] = SYSTEM_DEFAULT_CONSTRAINTS
    system_defaulted: bool = True
    selector_of: Callable[[Pod], Selector] = _no_workload_selector

    def for_pod(self, pod: Pod) -> tuple[SpreadConstraint, ...]:
        """buildDefaultConstraints: the defaults over the pod's workload selector, or none."""
        if not self.constraints:
            return ()
        selector = self.selector_of(pod)
        if not selector.requirements:
            return ()
        return tuple(
            msgspec.structs.replace(compile_constraint(pod, c, False), selector=selector)
            for c in self.constraints
        )


def default_selector(
    pod: Pod,
    service_selectors: Iterable[Mapping[str, str]],
    controller_selector: LabelSelector | Mapping[str, str] | None = None,
) -> Selector:
    """helper/spread.go DefaultSelector: the union of the selectors that pick the pod.

    `service_selectors` are the `spec.selector` maps of the Services in the pod's namespace (one
    that is empty or does not match the pod is skipped, as GetPodServices does);
    `controller_selector` is the selector of the pod's controller when it is a
    ReplicationController (a map) or a ReplicaSet / StatefulSet (a LabelSelector).
    """
    labels = pod.metadata.labels
    merged: dict[str, str] = {}
    for selector in service_selectors:
        if selector and all(labels.get(k) == v for k, v in selector.items()):
            merged.update(selector)
    if isinstance(controller_selector, LabelSelector):
        extra = compile_label_selector(controller_selector)
        if extra.nothing:
            return selector_from_map(merged)
        requirements = (*selector_from_map(merged).requirements, *extra.requirements)
        return Selector(tuple(sorted(requirements, key=lambda r: r.key)))
    if controller_selector is not None:
        merged.update(controller_selector)
    return selector_from_map(merged)


def refused_by_taints(index: ClusterIndex, pod: Pod) -> Set[str]:
    """Nodes with a NoSchedule/NoExecute taint the pod does not tolerate (nodeTaintsPolicy)."""
    refused: set[str] = set()
    for taints, group in index.taint_groups().items():
        if first_untolerated(pod.spec.tolerations, taints) is not None:
            refused.update(group)
    return refused


class NodeInclusion:
    """Which nodes' domains a constraint counts (common.go matchNodeInclusionPolicies).

    Computed lazily and once per decision: the pod's required node affinity (Honor, the default)
    and its untolerated taints (Honor, by opt-in) are the same for every constraint.
    """

    def __init__(self, index: ClusterIndex, pod: Pod) -> None:
        self._index = index
        self._pod = pod
        self._affinity: Set[str] | None = None
        self._taints: Set[str] | None = None

    def affinity_nodes(self) -> Set[str] | None:
        """Nodes matching the pod's nodeSelector and required node affinity; None: all."""
        required = required_node_affinity(self._pod)
        if required.is_empty:
            return None
        if self._affinity is None:
            self._affinity = required_nodes(required, self._index)
        return self._affinity

    def tainted(self) -> Set[str]:
        if self._taints is None:
            self._taints = refused_by_taints(self._index, self._pod)
        return self._taints

    def eligible(self, constraint: SpreadConstraint, candidates: Set[str]) -> Set[str]:
        """`candidates` less the nodes the constraint's policies leave out."""
        nodes = candidates
        if constraint.honors_node_affinity:
            allowed = self.affinity_nodes()
            if allowed is not None:
                nodes = nodes & allowed
        if constraint.honors_taints and self.tainted():
            nodes = nodes - self.tainted()
        return nodes


def counted_pods(
    index: ClusterIndex, pod: Pod, constraint: SpreadConstraint, *, include_self: bool = False
) -> Iterator[PodRecord]:
    """Pods the constraint counts (common.go countPodsMatchSelector): the incoming pod's
    namespace, matched by the selector, not terminating; an empty selector counts none. The pod
    itself, if indexed, only with `include_self` (how a placed pod's spread stands now)."""
    if not constraint.selector.requirements:
        return
    scope = NamespaceScope(everywhere=False, names=frozenset((pod.metadata.namespace,)))
    own = "" if include_self else pod.key
    for record in index.matching_pods(scope, constraint.selector):
        if not record.terminating and record.key != own:
            yield record


def domain_values(index: ClusterIndex, key: str, nodes: Set[str]) -> Collection[str]:
    """The distinct `key` domains of `nodes` (which all carry the key), cheapest way first."""
    by_value = index.domains(key)
    if len(nodes) == len(index.nodes_with(key)):
        return by_value.keys()
    if len(nodes) <= len(by_value):
        return {value for node in nodes if (value := index.domain(node, key)) is not None}
    return {value for value, members in by_value.items() if not members.isdisjoint(nodes)}
