"""nodeSelector and node affinity: the NodeAffinity plugin's filter, pre-filter and score inputs.

Semantics: k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go (v1.36) and
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go. Node selector terms are ORed, the
requirements inside one term ANDed; a term with neither matchExpressions nor matchFields selects
nothing; matchFields only knows `metadata.name`.

Besides the direct per-node check, every rule can be evaluated as set algebra over a label index
(`NodeLabelView`), so a filter over N nodes costs a few set operations, not N rule walks.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Final, Protocol

import msgspec

from hostaffinity.affinity.model import NodeSelectorTerm, Pod
from hostaffinity.affinity.selectors import (
    DOES_NOT_EXIST,
    EXISTS,
    GT,
    IN,
    NOT_IN,
    NOTHING,
    Requirement,
    Selector,
    compile_node_requirements,
    parse_int64,
    selector_from_map,
)

NODE_NAME_FIELD: Final = "metadata.name"


class NodeLabelView(Protocol):
    """What set evaluation needs from an index of node labels."""

    def all_nodes(self) -> Set[str]: ...

    def label_values(self, key: str) -> Mapping[str, Set[str]]:
        """Value -> nodes carrying `key=value` (raw node labels)."""
        ...


class NodeTerm(msgspec.Struct, frozen=True):
    """One nodeSelectorTerm: label requirements and `metadata.name` field requirements."""

    labels: Selector
    fields: Selector

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Direct check against one node."""
        return self.labels.matches(labels) and self.fields.matches({NODE_NAME_FIELD: node_name})

    def describe(self) -> str:
        """Human form of the term."""
        parts = [r.describe() for r in self.labels.requirements]
        parts += [r.describe() for r in self.fields.requirements]
        return "<invalid>" if self.labels.nothing or self.fields.nothing else " and ".join(parts)


class RequiredNodeAffinity(msgspec.Struct, frozen=True):
    """The pod's hard node constraints: `nodeSelector` AND (any of the required terms).

    `terms` is None when the pod has no required node affinity at all; an empty tuple means it
    has one that no node can satisfy. `prefilter_names` is the node-name set the PreFilter narrows
    to, or None when every node stays a candidate.
    """

    node_selector: Selector | None = None
    terms: tuple[NodeTerm, ...] | None = None
    prefilter_names: frozenset[str] | None = None

    @property
    def is_empty(self) -> bool:
        """No constraint at all: the plugin would skip the pod."""
        return self.node_selector is None and self.terms is None

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Direct check against one node (RequiredNodeAffinity.Match)."""
        if self.node_selector is not None and not self.node_selector.matches(labels):
            return False
        return self.terms is None or any(t.matches(node_name, labels) for t in self.terms)

    def describe(self) -> str:
        """Human form naming both parts."""
        parts = []
        if self.node_selector is not None:
            parts.append(f"nodeSelector {self.node_selector.describe()}")
        if self.terms is not None:
            terms = " OR ".join(f"({t.describe()})" for t in self.terms) or "<no valid term>"
            parts.append(f"required node affinity {terms}")
        return " and ".join(parts)


def _compile_term(term: NodeSelectorTerm) -> NodeTerm | None:
    """None for a term that selects nothing because it is empty."""
    if not term.match_expressions and not term.match_fields:
        return None
    fields = compile_node_requirements(term.match_fields or ())
    if any(r.op not in (IN, NOT_IN) or len(r.values) != 1 for r in fields.requirements):
        fields = NOTHING
    return NodeTerm(compile_node_requirements(term.match_expressions or ()), fields)


def _prefilter_names(terms: list[NodeSelectorTerm]) -> frozenset[str] | None:
    """The nodes named by `metadata.name In` in every term (node_affinity.go PreFilter)."""
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        term_names: set[str] | None = None
        for field in term.match_fields or ():
            if field.key == NODE_NAME_FIELD and field.operator == IN:
                values = set(field.values or ())
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            return None
        names |= term_names
    return frozenset(names)


def required_node_affinity(pod: Pod) -> RequiredNodeAffinity:
    """Compile the pod's nodeSelector and required node affinity."""
    node_selector = None
    if pod.spec.node_selector is not None:
        node_selector = selector_from_map(pod.spec.node_selector)
    affinity = pod.spec.affinity
    required = None
    if affinity is not None and affinity.node_affinity is not None:
        required = affinity.node_affinity.required_during_scheduling_ignored_during_execution
    if required is None:
        return RequiredNodeAffinity(node_selector=node_selector)
    raw = required.node_selector_terms
    terms = tuple(t for t in map(_compile_term, raw) if t is not None)
    return RequiredNodeAffinity(node_selector, terms, _prefilter_names(raw))


def preferred_node_terms(pod: Pod) -> tuple[tuple[int, NodeTerm], ...]:
    """(weight, term) of the pod's preferred node affinity; empty terms are ignored."""
    affinity = pod.spec.affinity
    if affinity is None or affinity.node_affinity is None:
        return ()
    preferred = affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
    compiled = ((p.weight, _compile_term(p.preference)) for p in preferred or ())
    return tuple((weight, term) for weight, term in compiled if term is not None and weight)


def _union(sets: list[Set[str]]) -> set[str]:
    result: set[str] = set()
    result.update(*sets)
    return result


def _requirement_nodes(requirement: Requirement, view: NodeLabelView) -> Set[str]:
    """Nodes whose labels satisfy one requirement."""
    by_value = view.label_values(requirement.key)
    op = requirement.op
    if op in (IN, NOT_IN):
        hit = _union([by_value[v] for v in requirement.values if v in by_value])
        return hit if op == IN else view.all_nodes() - hit
    if op in (EXISTS, DOES_NOT_EXIST):
        present = _union(list(by_value.values()))
        return present if op == EXISTS else view.all_nodes() - present
    matched = []
    for value, nodes in by_value.items():
        number = parse_int64(value)
        if number is not None and (
            number > requirement.bound if op == GT else number < requirement.bound
        ):
            matched.append(nodes)
    return _union(matched)


def selector_nodes(selector: Selector, view: NodeLabelView) -> Set[str]:
    """Nodes whose labels a selector matches, by set algebra."""
    if selector.nothing:
        return frozenset()
    result: Set[str] = view.all_nodes()
    for requirement in selector.requirements:
        result = result & _requirement_nodes(requirement, view)
        if not result:
            break
    return result


def _field_nodes(fields: Selector, view: NodeLabelView) -> Set[str]:
    if fields.nothing:
        return frozenset()
    result: Set[str] = view.all_nodes()
    for requirement in fields.requirements:
        named = {name for name in requirement.values if requirement.key == NODE_NAME_FIELD}
        result = result & named if requirement.op == IN else result - named
    return result


def term_nodes(term: NodeTerm, view: NodeLabelView) -> Set[str]:
    """Nodes one node selector term selects."""
    return selector_nodes(term.labels, view) & _field_nodes(term.fields, view)


def required_nodes(required: RequiredNodeAffinity, view: NodeLabelView) -> Set[str]:
    """Nodes that satisfy the pod's nodeSelector and required node affinity."""
    result = view.all_nodes()
    if required.node_selector is not None:
        result = selector_nodes(required.node_selector, view)
    if required.terms is not None:
        result = result & _union([term_nodes(t, view) for t in required.terms])
    return result
