"""RemovePodsViolatingTopologySpreadConstraint: replicas piled into some topology domains.

Upstream (kubernetes-sigs/descheduler pkg/framework/plugins/
removepodsviolatingtopologyspreadconstraint/topologyspreadconstraint.go: Balance,
topologyIsBalanced, balanceDomains, sortDomains, filterNodesBelowIdealAvg) gathers the distinct
constraints of the pods per namespace, counts each constraint's matching pods per domain over the
nodes its inclusion policies admit, skips a constraint whose largest and smallest domains are
within maxSkew, and otherwise balances: domains sorted by size, pods moved from the largest
toward the smallest, never more than half the excess skew, never taking a domain below the
ideal average (pods / domains) nor lifting one above it. That algorithm is kept as it is.

What differs, each on purpose:
- the constraints are the engine's compiled ones (topology_spread.py): defaults, matchLabelKeys,
  and an opted-in pod's hostname spread read on the ESXi-host key, whose domains come from the
  topology KV's placements, so a vMotion counts before the node label catches up;
- a constraint counts every pod kube-scheduler counts (its namespace, its selector, not
  terminating); `namespaces` and `labelSelector` choose the pods whose constraints are balanced
  and the pods that may be evicted, as upstream's pod filter does;
- a KubeVirt VM replica's constraint is read as its workload's: the requirement a migration
  target's host-key spread carries to leave its own VM out (`kubevirt.io/created-by NotIn [its
  VMI's uid]`, written by the admission webhook and the engine's physical reading so that the
  source it replaces does not count) is dropped, so every replica of a VirtualMachine, VMIRS or
  VirtualMachinePool declares the same constraint and counts in it, migrated or not;
- each pod to move is one Violation for the eviction planner, whose node fit (the engine's
  kube-scheduler filter, PodTopologySpread included) always holds. `topologyBalanceNodeFit`
  (default true) further requires the target's domain to be below the ideal average, counted
  live, so planned moves fill the small domains one by one; false only asks for another domain.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass
from typing import ClassVar, Final

import msgspec

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import NamespaceScope
from hostaffinity.affinity.nodeaffinity import required_node_affinity
from hostaffinity.affinity.selectors import IN, NOT_IN, Requirement, Selector
from hostaffinity.affinity.topology_spread import (
    DO_NOT_SCHEDULE,
    SCHEDULE_ANYWAY,
    NodeInclusion,
    SpreadConstraint,
    domain_values,
)
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
    eviction_order,
)
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.schema.names import LABEL_KUBEVIRT_VMI_UID

ACTIONS: Final = (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
# The inclusion of a group whose holders' node affinity and taints leave no node out.
_EVERY_NODE: Final = msgspec.json.encode((None, None))


class TopologySpreadArgs(ScopedArgs, frozen=True):
    """Upstream's RemovePodsViolatingTopologySpreadConstraintArgs (types.go, defaults.go)."""

    constraints: list[str] = msgspec.field(default_factory=lambda: [DO_NOT_SCHEDULE])
    topology_balance_node_fit: bool = True
    # Deprecated upstream (v1alpha1's includeSoftConstraints): adds ScheduleAnyway.
    include_soft_constraints: bool = False

    def validate(self) -> list[str]:
        errors = super().validate()
        errors.extend(
            f"constraints: {action!r} is not one of {', '.join(ACTIONS)}"
            for action in self.constraints
            if action not in ACTIONS
        )
        return errors

    def actions(self) -> frozenset[str]:
        chosen = set(self.constraints)
        if self.include_soft_constraints:
            chosen.add(SCHEDULE_ANYWAY)
        return frozenset(chosen)


@dataclass(frozen=True, eq=False)
class SpreadGroup:
    """One distinct constraint of a namespace, with the node inclusion it was declared with
    (its pod's node affinity and tolerations, when the policies honour them). Interned: equal
    groups are one object, so sets and dicts of groups hash by identity."""

    namespace: str
    constraint: SpreadConstraint
    inclusion: bytes


class TopologySpread:
    """Keeps its bookkeeping between cycles, so a cycle costs the changes, not the cluster.

    Per pod (read from the state's journal of pod changes), the object last seen and the groups
    it declares; per group, the pods declaring it;
    and the groups found with nothing to move. A pod whose object changed (added, removed,
    relabelled, moved -- a planned move too) makes every group of its namespace whose selector
    matches it (before or after) be balanced again. A node whose domains may have changed (the
    state's journal of node changes: a vMotion, a relabel, a re-taint) does the same for the
    pods on it, whose domains moved; beyond that it can only change a group's domains, which
    for a group counting every node with its key are that key's domains in the cluster: when
    those changed, every group of that key is balanced again, and so is every group whose nodes
    depend on its holders' node affinity or taints (inclusion policies), on any node change.
    """

    name: ClassVar[str] = "RemovePodsViolatingTopologySpreadConstraint"
    # A pod landing (a rollout, a scale-up), a vMotion or relabelled node moving a domain, a
    # node added or uncordoned (a new, empty domain) can each break a spread.
    triggers: ClassVar[Change] = (
        SCOPE_CHANGES
        | Change.POD_AFFINITY
        | Change.NODE_LABELS
        | Change.NODE_ADDED
        | Change.NODE_UNCORDONED
    )

    def __init__(self, args: TopologySpreadArgs) -> None:
        self.args = args
        self._scope = PodScope(args)
        self._actions = args.actions()
        self._seen: dict[str, DeschedulerPod] = {}
        self._declared: dict[str, tuple[SpreadGroup, ...]] = {}
        self._holders: dict[SpreadGroup, set[str]] = {}
        # (namespace, label key, value or None) -> groups whose selector's anchor needs it
        # (Selector.anchor: In gives each value, Exists None); (namespace, None, None): no anchor.
        self._by_anchor: dict[tuple[str, str | None, str | None], set[SpreadGroup]] = {}
        self._interned: dict[tuple[str, SpreadConstraint, bytes], SpreadGroup] = {}
        self._settled: set[SpreadGroup] = set()
        # Per topology key of some group: its domains in the cluster when last refreshed.
        self._domains: dict[str, frozenset[str]] = {}
        self._node_position = -1  # before any journal: the first refresh unsettles every group
        self._journal_position = -1  # before any journal: the first refresh reads every pod

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        """The scope is not needed: the bookkeeping already reads only what changed (the
        state's journals of pod and node changes)."""
        self._refresh(state)
        found: list[Violation] = []
        for holder, _, group in self._unsettled():
            moves = self._balance(state, group, state.pods[holder])
            if moves:
                found.extend(moves)
            else:
                self._settled.add(group)
        return found

    def _unsettled(self) -> list[tuple[str, int, SpreadGroup]]:
        """The groups to balance, each with the pod it is read from: its first holder by key,
        in that order (then the holder's order of constraints), not the bookkeeping's, which a
        planned move reshuffles; so two passes over the same state plan alike."""
        chosen = []
        for group, holders in self._holders.items():
            if group not in self._settled:
                holder = min(holders)
                chosen.append((holder, self._declared[holder].index(group), group))
        chosen.sort(key=_holder_first)
        return chosen

    # -- the constraints -----------------------------------------------------------------------

    def _refresh(self, state: ClusterState) -> None:
        """Bring the bookkeeping up to the state: recompile changed pods, unsettle groups."""
        nodes, self._node_position = state.node_changes(self._node_position)
        if nodes is None:
            self._settled.clear()
            self._domains = {key: frozenset(state.index.domains(key)) for key in self._domains}
        elif nodes:
            self._nodes_changed(state, set(nodes))
        changed, self._journal_position = state.pod_changes(self._journal_position)
        keys = set(state.pods) | set(self._seen) if changed is None else set(changed)
        for key in keys:
            old, pod = self._seen.get(key), state.pods.get(key)
            if old is pod:
                continue
            self._forget(key, old)
            if pod is None:
                del self._seen[key]
            else:
                self._learn(state, key, pod)

    def _nodes_changed(self, state: ClusterState, nodes: set[str]) -> None:
        """Unsettle what a change of these nodes' domains can unbalance (see the class)."""
        index = state.index
        for node in nodes:
            for record in index.pods_on(node):
                self._unsettle(record.namespace, record.labels)
        moved: set[str] = set()
        for key, before in self._domains.items():
            now = frozenset(index.domains(key))
            if now != before:
                moved.add(key)
                self._domains[key] = now
        self._settled = {
            group
            for group in self._settled
            if group.inclusion == _EVERY_NODE and group.constraint.topology_key not in moved
        }

    def _learn(self, state: ClusterState, key: str, pod: DeschedulerPod) -> None:
        self._seen[key] = pod
        self._unsettle(pod.metadata.namespace, pod.metadata.labels)
        if not pod.spec.topology_spread_constraints:
            return
        groups = self._compile(state, pod)
        if groups:
            self._declared[key] = groups
        for group in groups:
            self._holders.setdefault(group, set()).add(key)
            topology_key = group.constraint.topology_key
            if topology_key not in self._domains:
                self._domains[topology_key] = frozenset(state.index.domains(topology_key))
            for slot in _anchor_slots(group):
                self._by_anchor.setdefault(slot, set()).add(group)

    def _forget(self, key: str, old: DeschedulerPod | None) -> None:
        if old is None:
            return
        self._unsettle(old.metadata.namespace, old.metadata.labels)
        for group in self._declared.pop(key, ()):
            holders = self._holders[group]
            holders.discard(key)
            if not holders:
                del self._holders[group]
                del self._interned[(group.namespace, group.constraint, group.inclusion)]
                for slot in _anchor_slots(group):
                    self._by_anchor[slot].discard(group)
                self._settled.discard(group)

    def _unsettle(self, namespace: str, labels: Mapping[str, str]) -> None:
        """The groups that count a pod of this namespace and labels must be balanced again
        (found through the anchors of their selectors, so a change costs the pod's labels, not
        the namespace's groups)."""
        if not self._settled:
            return
        slots: list[tuple[str, str | None, str | None]] = [(namespace, None, None)]
        for key, value in labels.items():
            slots.extend(((namespace, key, value), (namespace, key, None)))
        for slot in slots:
            for group in self._by_anchor.get(slot, ()):
                if group in self._settled and group.constraint.selector.matches(labels):
                    self._settled.discard(group)

    def _compile(self, state: ClusterState, pod: DeschedulerPod) -> tuple[SpreadGroup, ...]:
        if not self._scope.covers(pod):
            return ()
        affinity = required_node_affinity(pod)
        groups = []
        record = state.index.pod(pod.key)  # the index compiled its spreads when it took it
        spreads = record.spreads if record is not None else state.engine.spreads(pod)
        for declared in spreads:
            if declared.when_unsatisfiable not in self._actions:
                continue
            constraint = workload_constraint(pod, declared)
            inclusion = msgspec.json.encode(
                (
                    affinity if constraint.honors_node_affinity and not affinity.is_empty else None,
                    pod.spec.tolerations if constraint.honors_taints else None,
                )
            )
            content = (pod.metadata.namespace, constraint, inclusion)
            group = self._interned.get(content)
            if group is None:
                group = self._interned[content] = SpreadGroup(*content)
            groups.append(group)
        return tuple(dict.fromkeys(groups))

    # -- balancing -----------------------------------------------------------------------------

    def _balance(
        self, state: ClusterState, group: SpreadGroup, holder: DeschedulerPod
    ) -> list[Violation]:
        index, constraint = state.index, group.constraint
        key = constraint.topology_key
        eligible = NodeInclusion(index, holder).eligible(constraint, index.nodes_with(key))
        values = domain_values(index, key, eligible)
        if not values:
            return []
        counted: dict[str, list[str]] = {}
        for pod_key, node in _matching(index, group):
            if node in eligible and (value := index.domain(node, key)) is not None:
                counted.setdefault(value, []).append(pod_key)
        if _balanced(counted, len(values), constraint.max_skew):
            return []
        total = sum(len(pods) for pods in counted.values())
        ideal = total / len(values)
        # Sorted by size: the empty domains first (they are alike), then the others.
        occupied = sorted(counted.items(), key=lambda item: (len(item[1]), item[0]))
        empty = len(values) - len(occupied)
        leaving = [self._in_eviction_order(state, pods) for _, pods in occupied]
        sizes = [0] * empty + [len(pods) for pods in leaving]
        moves = [
            (pod_key, occupied[position - empty][0])
            for pod_key, position in balance_domains(
                sizes, [[]] * empty + leaving, ideal, constraint.max_skew
            )
        ]
        rule = _rule(holder, constraint, counted, len(values), ideal)
        improves = self._target_check(state, group, eligible, ideal)
        return [
            Violation(self.name, rule, (pod_key,), f"{pod_key} moves from {key}={source}", improves)
            for pod_key, source in moves
            if self._scope.covers(state.pods[pod_key])
        ]

    def _in_eviction_order(self, state: ClusterState, keys: list[str]) -> list[str]:
        """sortDomains: pods outside the plugin's scope last, then those bound by a node
        selector or node affinity, each part lowest priority (then newest) first."""
        ordered = eviction_order(state, keys)

        def rank(pod_key: str) -> tuple[bool, bool]:
            pod = state.pods[pod_key]
            bound = bool(pod.spec.node_selector) or bool(
                pod.spec.affinity and pod.spec.affinity.node_affinity
            )
            return (not self._scope.covers(pod), bound)

        return sorted(ordered, key=rank)

    def _target_check(
        self, state: ClusterState, group: SpreadGroup, eligible: Set[str], ideal: float
    ) -> TargetCheck:
        """Where a moved pod may go: another domain the constraint counts, below the ideal
        average with the planned moves so far (filterNodesBelowIdealAvg, counted live)."""
        index, key = state.index, group.constraint.topology_key
        below_ideal = self.args.topology_balance_node_fit

        def improves(pod_key: str, node: str) -> bool:
            target = index.domain(node, key)
            if target is None or node not in eligible:
                return False
            source = index.domain(state.pods[pod_key].spec.node_name, key)
            if target == source:
                return False
            if not below_ideal:
                return True
            there = sum(
                1
                for other, other_node in _matching(index, group)
                if other_node in eligible and index.domain(other_node, key) == target
            )
            return there < ideal

        return improves


def workload_constraint(pod: DeschedulerPod, constraint: SpreadConstraint) -> SpreadConstraint:
    """The constraint without the requirement that leaves the pod's own VM out, if it has it."""
    uid = pod.metadata.labels.get(LABEL_KUBEVIRT_VMI_UID)
    if uid is None:
        return constraint
    own = Requirement(LABEL_KUBEVIRT_VMI_UID, NOT_IN, frozenset((uid,)))
    requirements = constraint.selector.requirements
    if own not in requirements:
        return constraint
    kept = Selector(tuple(r for r in requirements if r != own), constraint.selector.nothing)
    return msgspec.structs.replace(constraint, selector=kept)


def _anchor_slots(group: SpreadGroup) -> list[tuple[str, str | None, str | None]]:
    anchor = group.constraint.selector.anchor()
    if anchor is None:
        return [(group.namespace, None, None)]
    if anchor.op == IN:
        return [(group.namespace, anchor.key, value) for value in anchor.values]
    return [(group.namespace, anchor.key, None)]


def _matching(index: ClusterIndex, group: SpreadGroup) -> Iterator[tuple[str, str]]:
    """(pod, node) of the pods the constraint counts: its namespace, its selector, not
    terminating (podtopologyspread common.go countPodsMatchSelector; IsPodTerminating)."""
    selector = group.constraint.selector
    if not selector.requirements:
        return
    scope = NamespaceScope(everywhere=False, names=frozenset((group.namespace,)))
    for record in index.matching_pods(scope, selector):
        if not record.terminating:
            yield record.key, record.node


def _balanced(counted: dict[str, list[str]], domains: int, max_skew: int) -> bool:
    """topologyIsBalanced: the largest and the smallest domain (empty ones included) are
    within maxSkew."""
    sizes = [len(pods) for pods in counted.values()]
    largest = max(sizes, default=0)
    smallest = 0 if len(sizes) < domains else min(sizes)
    return largest - smallest <= max_skew


def balance_domains(
    sizes: list[int], pods: list[list[str]], ideal: float, max_skew: int
) -> list[tuple[str, int]]:
    """upstream balanceDomains over domains sorted by size: (pod, its domain's position) for
    each pod to move. `pods[d]` are domain d's pods, the first to go first.

    The two ends walk toward each other: while the largest and the smallest differ by more than
    maxSkew, move the least of half the excess skew, what the large one has above the ideal,
    and what the small one lacks below it (each rounded up); a large domain at or below the
    ideal gives no more. Moved pods are added to the small domain's size, as upstream tracks
    them; they are never taken again (only domains above the ideal give).
    """
    sizes = list(sizes)
    given = [0] * len(sizes)
    moves: list[tuple[str, int]] = []
    i, j = 0, len(sizes) - 1
    while i < j:
        if sizes[j] <= ideal:
            j -= 1
        skew = sizes[j] - sizes[i]
        if skew <= max_skew:
            i += 1
            continue
        above = math.ceil(sizes[j] - ideal)
        below = math.ceil(ideal - sizes[i])
        count = min(above, below, math.ceil((skew - max_skew) / 2))
        if count <= 0:
            i += 1
            continue
        moves.extend((pod_key, j) for pod_key in pods[j][given[j] : given[j] + count])
        given[j] += count
        sizes[j] -= count
        sizes[i] += count
    return moves


def _rule(
    holder: DeschedulerPod,
    constraint: SpreadConstraint,
    counted: dict[str, list[str]],
    domains: int,
    ideal: float,
) -> str:
    largest = max(counted.items(), key=lambda item: (len(item[1]), item[0]))
    smallest = 0 if len(counted) < domains else min(len(p) for p in counted.values())
    return (
        f"topology spread of {holder.key} ({constraint.describe()}): "
        f"{constraint.topology_key}={largest[0]} has {len(largest[1])} matching pods, the "
        f"smallest of {domains} domains {smallest} (ideal {ideal:.2f})"
    )


def _holder_first(chosen: tuple[str, int, SpreadGroup]) -> tuple[str, int]:
    return chosen[0], chosen[1]
