"""RemovePodsViolatingInterPodAntiAffinity: pods sharing a topology domain they must not share.

Upstream (pkg/framework/plugins/removepodsviolatinginterpodantiaffinity/pod_antiaffinity.go)
checks required terms between pods of one node. Here every topology key counts, the ESXi-host
domain included with placements from the topology KV (so a vMotion counts before the node label
catches up), namespaces / namespaceSelector / matchLabelKeys as the engine compiles them, and
preferred terms when `includePreferred` is set. Each violating pair gives one Violation whose
candidates are both pods, so the planner picks one of them and never both.
"""

from __future__ import annotations

from typing import ClassVar

from hostaffinity.affinity.index import PodRecord
from hostaffinity.affinity.interpod import AffinityTerm, incoming_scope
from hostaffinity.descheduler.state import ClusterState
from hostaffinity.descheduler.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
    describe_order,
    eviction_order,
)
from hostaffinity.descheduler.strategies.changes import SCOPE_CHANGES, Change


class InterPodAntiAffinityArgs(ScopedArgs, frozen=True):
    # Ours: also repair preferred anti-affinity, moving a pod only to a domain free of matches.
    include_preferred: bool = False


class InterPodAntiAffinity:
    name: ClassVar[str] = "RemovePodsViolatingInterPodAntiAffinity"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.POD_AFFINITY | Change.NODE_LABELS

    def __init__(self, args: InterPodAntiAffinityArgs) -> None:
        self.args = args
        self._scope = PodScope(args)

    def violations(self, state: ClusterState) -> list[Violation]:
        index = state.index
        seen: set[frozenset[str]] = set()
        found: list[Violation] = []
        for holder in index.pods():
            terms = holder.terms
            if not terms:
                continue
            kinds = [(terms.required_anti, "required")]
            if self.args.include_preferred:
                kinds.append((terms.preferred_anti, "preferred"))
            for group, kind in kinds:
                for term in group:
                    for other in self._culprits(state, holder, term):
                        pair = frozenset((holder.key, other.key))
                        if pair in seen:
                            continue
                        seen.add(pair)
                        violation = self._violation(state, holder, other, term, kind)
                        if violation is not None:
                            found.append(violation)
        return found

    @staticmethod
    def _culprits(state: ClusterState, holder: PodRecord, term: AffinityTerm) -> list[PodRecord]:
        index = state.index
        domain = index.domain(holder.node, term.topology_key)
        if domain is None:
            return []
        scope = incoming_scope(term, index.namespaces)
        return [
            record
            for record in index.matching_pods(scope, term.selector)
            if record.key != holder.key and index.domain(record.node, term.topology_key) == domain
        ]

    def _violation(
        self,
        state: ClusterState,
        holder: PodRecord,
        other: PodRecord,
        term: AffinityTerm,
        kind: str,
    ) -> Violation | None:
        keys = [k for k in (holder.key, other.key) if self._scope.covers(state.pods[k])]
        if not keys:
            return None
        order = eviction_order(state, keys)
        domain = state.index.domain(holder.node, term.topology_key)
        rule = (
            f"{kind} pod anti-affinity of {holder.key} ({term.describe()}): {other.key} shares "
            f"{term.topology_key}={domain}"
        )
        improves = None if kind == "required" else _leaves_domain(state, holder, other, term)
        return Violation(self.name, rule, order, describe_order(state, order), improves)


def _leaves_domain(
    state: ClusterState, holder: PodRecord, other: PodRecord, term: AffinityTerm
) -> TargetCheck:
    """For a preferred term: the moved pod must land outside the holder's domain and where none
    of its own preferred anti-affinity terms finds a match (else the move gains nothing)."""
    key = term.topology_key

    def improves(pod_key: str, node: str) -> bool:
        index = state.index
        target = index.domain(node, key)
        if target is None or target == index.domain(holder.node, key):
            return False
        moved = index.pod(pod_key)
        own_terms = moved.terms.preferred_anti if moved is not None else ()
        return not any(_matches_in(state, pod_key, own, node) for own in own_terms)

    return improves


def _matches_in(state: ClusterState, pod_key: str, term: AffinityTerm, node: str) -> bool:
    """Whether a pod other than `pod_key` matching `term` sits in `node`'s domain."""
    index = state.index
    domain = index.domain(node, term.topology_key)
    if domain is None:
        return False
    scope = incoming_scope(term, index.namespaces)
    return any(
        r.key != pod_key and index.domain(r.node, term.topology_key) == domain
        for r in index.matching_pods(scope, term.selector)
    )
