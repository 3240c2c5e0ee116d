"""RemovePodsViolatingInterPodAntiAffinity: pods sharing a topology domain they must not share.

Upstream (pkg/framework/plugins/removepodsviolatinginterpodantiaffinity/pod_antiaffinity.go)
checks required terms between pods of one node. Here every topology key counts, the ESXi-host
domain included with placements from the topology KV (so a vMotion counts before the node label
catches up), namespaces / namespaceSelector / matchLabelKeys as the engine compiles them, and
preferred terms when `includePreferred` is set. Each violating pair gives one Violation whose
candidates are both pods, so the planner picks one of them and never both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Final

from hostaffinity.affinity.index import PodRecord, TermKind
from hostaffinity.affinity.interpod import AffinityTerm, incoming_scope
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
    describe_order,
    eviction_order,
)
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.scope import Scope, touched_pods

# No namespace is named "": the index reads its labels as none, which is how a term's
# namespaceSelector is read for the pods it may select (interpod.incoming_scope).
_NO_NAMESPACE: Final = ""


@dataclass
class _Pairs:
    """The violations found so far, each pair of pods once."""

    found: list[Violation] = field(default_factory=list)
    _seen: set[frozenset[str]] = field(default_factory=set)

    def seen(self, holder: PodRecord, other: PodRecord) -> bool:
        return frozenset((holder.key, other.key)) in self._seen

    def add(self, violation: Violation | None, holder: PodRecord, other: PodRecord) -> None:
        pair = frozenset((holder.key, other.key))
        if pair in self._seen:
            return
        self._seen.add(pair)
        if violation is not None:
            self.found.append(violation)


class InterPodAntiAffinityArgs(ScopedArgs, frozen=True):
    # Ours: also repair preferred anti-affinity, moving a pod only to a domain free of matches.
    include_preferred: bool = False


class InterPodAntiAffinity:
    name: ClassVar[str] = "RemovePodsViolatingInterPodAntiAffinity"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.POD_AFFINITY | Change.NODE_LABELS

    def __init__(self, args: InterPodAntiAffinityArgs) -> None:
        self.args = args
        self._scope = PodScope(args)

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        pairs = _Pairs()
        if scope is None:
            for holder in state.index.pods():
                self._judge_holder(state, holder, pairs)
            return pairs.found
        # A pair can only be new when one of its pods moved domain or changed: the changed pods
        # as holders, and every holder whose terms select a changed pod, checked against it.
        changed = touched_pods(state, scope)
        for record in changed:
            self._judge_holder(state, record, pairs)
        for record in changed:
            for kind, label in self._kinds():
                for holder, term in _terms_selecting(state, kind, record):
                    if holder.key == record.key or pairs.seen(holder, record):
                        continue
                    if _same_domain(state, holder, record, term):
                        violation = self._violation(state, holder, record, term, label)
                        pairs.add(violation, holder, record)
        return pairs.found

    def _kinds(self) -> list[tuple[TermKind, str]]:
        kinds: list[tuple[TermKind, str]] = [("required_anti", "required")]
        if self.args.include_preferred:
            kinds.append(("preferred_anti", "preferred"))
        return kinds

    def _judge_holder(self, state: ClusterState, holder: PodRecord, pairs: _Pairs) -> None:
        """Every pair of the holder's terms (each pair once, whoever holds it)."""
        terms = holder.terms
        if not terms:
            return
        for kind, label in self._kinds():
            for term in getattr(terms, kind):
                for other in self._culprits(state, holder, term):
                    if not pairs.seen(holder, other):
                        pairs.add(self._violation(state, holder, other, term, label), holder, other)

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


def _terms_selecting(
    state: ClusterState, kind: TermKind, record: PodRecord
) -> Iterator[tuple[PodRecord, AffinityTerm]]:
    """Existing pods' terms of `kind` that select `record` as the full pass reads them
    (`_culprits`: incoming_scope, so a namespaceSelector matching no labels selects every
    namespace). The index finds them by the pod's labels, in its namespace and as if its
    namespace had no labels; each is then checked the way the full pass checks it."""
    index = state.index
    found: dict[tuple[str, int], tuple[PodRecord, AffinityTerm]] = {}
    for namespace in (record.namespace, _NO_NAMESPACE):
        for holder, term in index.terms_matching(kind, namespace, record.labels):
            found.setdefault((holder.key, id(term)), (holder, term))
    for holder, term in found.values():
        if _selects(state, term, record):
            yield holder, term


def _selects(state: ClusterState, term: AffinityTerm, record: PodRecord) -> bool:
    scope = incoming_scope(term, state.index.namespaces)
    in_scope = scope.everywhere or record.namespace in scope.names
    return in_scope and term.selector.matches(record.labels)


def _same_domain(
    state: ClusterState, holder: PodRecord, other: PodRecord, term: AffinityTerm
) -> bool:
    index = state.index
    domain = index.domain(holder.node, term.topology_key)
    return domain is not None and index.domain(other.node, term.topology_key) == domain
