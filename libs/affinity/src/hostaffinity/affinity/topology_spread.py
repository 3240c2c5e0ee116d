"""Topology spread constraints: compiled once per pod, with their defaults and physical reading.

Semantics: kubernetes pkg/scheduler/framework/plugins/podtopologyspread/common.go
(filterTopologySpreadConstraints, mergeLabelSetWithSelector) and plugin.go
(systemDefaultConstraints) at v1.36. A null `minDomains` is 1, a null `nodeAffinityPolicy` is
Honor, a null `nodeTaintsPolicy` Ignore; `matchLabelKeys` adds `key In [the pod's value]` for
each key the pod carries (a null `labelSelector` stays a selector of nothing).

The physical reading: with the opt-in (pod annotation or cluster-wide), a `kubernetes.io/hostname`
spread is compiled as a spread over ESXi hosts, exactly as interpod.py reads a hostname
anti-affinity term: spreading replicas over VMs that share one host is not what the user asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from hostaffinity.affinity.interpod import HOST_KEYS, HOSTNAME_KEY, physical_opt_in
from hostaffinity.affinity.model import Pod, TopologySpreadConstraint
from hostaffinity.affinity.selectors import IN, Requirement, Selector, compile_label_selector
from hostaffinity.schema.names import LABEL_ESXI_HOST

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
    key = constraint.topology_key
    if physical and key == HOSTNAME_KEY:
        key = LABEL_ESXI_HOST
    selector = merge_label_keys(
        compile_label_selector(constraint.label_selector),
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
    pod: Pod, physical_anti_affinity: bool = False
) -> tuple[SpreadConstraint, ...]:
    """Compile a pod's `topologySpreadConstraints`, in the order written.

    `physical_anti_affinity` is the cluster-wide opt-in; the pod annotation
    (`hostaffinity.io/physical-anti-affinity: "true"`) opts in one pod. Opted in, a
    `kubernetes.io/hostname` constraint is compiled on `hostaffinity.io/esxi-host`.
    """
    written = pod.spec.topology_spread_constraints
    if not written:
        return ()
    physical = physical_opt_in(pod, physical_anti_affinity)
    return tuple(compile_constraint(pod, c, physical) for c in written)


def system_default_constraints(selector: Selector) -> tuple[SpreadConstraint, ...]:
    """kube-scheduler's system defaults (plugin.go systemDefaultConstraints): hostname maxSkew 3
    and zone maxSkew 5, both ScheduleAnyway, over the selector its DefaultSelector built from the
    Services, ReplicationControllers, ReplicaSets and StatefulSets that select the pod."""
    return (
        SpreadConstraint(3, HOSTNAME_KEY, selector, SCHEDULE_ANYWAY, declared_key=HOSTNAME_KEY),
        SpreadConstraint(5, ZONE_KEY, selector, SCHEDULE_ANYWAY, declared_key=ZONE_KEY),
    )
