"""Whether the inter-pod terms that concern a placed pod hold where it runs now.

The filter (engine.py) answers "may the pod go there"; an operator looking at a running pod asks
"is what it asked for still true" -- after a vMotion, a term can be broken without anyone having
scheduled anything. Each term is checked on its own against the pod's current domain, and a
broken one is worded by explain.py, so the answer reads as the extender's and descheduler's do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Literal

import msgspec

from hostaffinity.affinity import explain
from hostaffinity.affinity.index import ClusterIndex, PodRecord, TermKind
from hostaffinity.affinity.interpod import AffinityTerm, PodTerms, incoming_scope

State = Literal["holds", "violated", "unknown"]
KIND_WORDS: Final[dict[TermKind, str]] = {
    "required_affinity": "required affinity",
    "required_anti": "required anti-affinity",
    "preferred_affinity": "preferred affinity",
    "preferred_anti": "preferred anti-affinity",
}


class Standing(msgspec.Struct, frozen=True):
    """One term and how it stands: `owner` is the pod whose term it is (the pod itself, or an
    existing pod whose required anti-affinity selects it); `why` says what makes it so."""

    kind: TermKind
    term: AffinityTerm
    owner: str
    state: State
    why: str


def own_terms(terms: PodTerms) -> Iterator[tuple[TermKind, AffinityTerm]]:
    """A pod's own terms, required before preferred, affinity before anti-affinity."""
    yield from (("required_affinity", t) for t in terms.required_affinity)
    yield from (("required_anti", t) for t in terms.required_anti)
    yield from (("preferred_affinity", t) for t in terms.preferred_affinity)
    yield from (("preferred_anti", t) for t in terms.preferred_anti)


def standings(index: ClusterIndex, record: PodRecord) -> list[Standing]:
    """Every term that concerns the assigned pod `record`: its own, then existing pods'
    required anti-affinity terms that select it."""
    found = [_own(index, record, kind, term) for kind, term in own_terms(record.terms)]
    for owner, term in index.terms_matching("required_anti", record.namespace, record.labels):
        if owner.key != record.key:
            found.append(_selecting(index, record, owner, term))
    return found


def _others(index: ClusterIndex, record: PodRecord, term: AffinityTerm) -> Iterator[PodRecord]:
    scope = incoming_scope(term, index.namespaces)
    return (r for r in index.matching_pods(scope, term.selector) if r.key != record.key)


def _own(index: ClusterIndex, record: PodRecord, kind: TermKind, term: AffinityTerm) -> Standing:
    key = term.topology_key
    domain = index.domain(record.node, key)
    if domain is None:
        return Standing(kind, term, record.key, "unknown", explain.unplaced(key).message)
    others = list(_others(index, record, term))
    beside = [r for r in others if index.domain(r.node, key) == domain]
    if kind in ("required_anti", "preferred_anti"):
        if beside:
            why = explain.anti_affinity(term, beside[0], domain).message
            return Standing(kind, term, record.key, "violated", why)
        why = f"no pod it selects runs in {key}={domain}"
        return Standing(kind, term, record.key, "holds", why)
    if beside:
        why = f"pod {beside[0].key} (on node {beside[0].node}) runs in {key}={domain}"
        return Standing(kind, term, record.key, "holds", why)
    scope = incoming_scope(term, index.namespaces)
    if not others and record.namespace in scope and term.selector.matches(record.labels):
        why = "no other pod matches anywhere and the pod matches its own term (first of its group)"
        return Standing(kind, term, record.key, "holds", why)
    return Standing(kind, term, record.key, "violated", explain.affinity_unmatched(term).message)


def _selecting(
    index: ClusterIndex, record: PodRecord, owner: PodRecord, term: AffinityTerm
) -> Standing:
    key = term.topology_key
    domain = index.domain(record.node, key)
    if domain is None:
        return Standing("required_anti", term, owner.key, "unknown", explain.unplaced(key).message)
    if index.domain(owner.node, key) == domain:
        why = explain.existing_anti_affinity(term, owner, domain).message
        return Standing("required_anti", term, owner.key, "violated", why)
    why = f"pod {owner.key} runs on node {owner.node}, outside {key}={domain}"
    return Standing("required_anti", term, owner.key, "holds", why)
