"""Label selectors and selector requirements, compiled once and matched many times.

Semantics follow k8s.io/apimachinery at v1.36: `pkg/labels/selector.go` (Requirement.Matches)
and `pkg/apis/meta/v1/helpers.go` (LabelSelectorAsSelector: a nil selector selects nothing, an
empty one selects everything). A selector that the API server would reject (In without values,
Gt with a non-integer) compiles to one that selects nothing, so a malformed object never matches
by accident.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from hostaffinity.affinity.model import LabelSelector, NodeSelectorRequirement

IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"
GT: Final = "Gt"
LT: Final = "Lt"

_SET_OPS: Final = frozenset({IN, NOT_IN})
_PRESENCE_OPS: Final = frozenset({EXISTS, DOES_NOT_EXIST})
# Go's strconv.ParseInt(s, 10, 64): optional sign, decimal digits only (Python's int() would
# also accept spaces and underscores).
_INT64: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class Requirement(msgspec.Struct, frozen=True, gc=False):
    """One `key op values` requirement; `bound` holds the integer of a Gt/Lt requirement."""

    key: str
    op: str
    values: frozenset[str] = frozenset()
    bound: int = 0

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this requirement (labels.Requirement.Matches)."""
        op = self.op
        if op == IN:
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op == NOT_IN:
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        number = parse_int64(labels.get(self.key))
        if number is None:
            return False
        return number > self.bound if op == GT else number < self.bound

    def describe(self) -> str:
        """Human form, as kubectl would show it."""
        if self.op == IN and len(self.values) == 1:
            return f"{self.key}={next(iter(self.values))}"
        if self.op in _SET_OPS:
            return f"{self.key} {self.op} [{', '.join(sorted(self.values))}]"
        if self.op in _PRESENCE_OPS:
            return f"{self.key} {self.op}"
        return f"{self.key} {self.op} {self.bound}"


class Selector(msgspec.Struct, frozen=True, gc=False):
    """A conjunction of requirements; `nothing` marks the selector that selects no object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set is selected."""
        if self.nothing:
            return False
        return all(requirement.matches(labels) for requirement in self.requirements)

    def anchor(self) -> Requirement | None:
        """A positive requirement (In, else Exists) to look candidates up by, if there is one.

        Every object the selector matches carries the anchor's key (and one of its values for
        In), so an index keyed by labels can produce the candidates without a scan.
        """
        exists = None
        for requirement in self.requirements:
            if requirement.op == IN:
                return requirement
            if requirement.op == EXISTS and exists is None:
                exists = requirement
        return exists

    def describe(self) -> str:
        """Human form: `{app=web, tier In [a, b]}`, `{}` for everything, `<none>` for nothing."""
        if self.nothing:
            return "<none>"
        return "{" + ", ".join(r.describe() for r in self.requirements) + "}"


NOTHING: Final = Selector(nothing=True)
EVERYTHING: Final = Selector()


def parse_int64(text: str | None) -> int | None:
    """Parse like Go's strconv.ParseInt(text, 10, 64); None when it would fail."""
    if text is None or _INT64.fullmatch(text) is None:
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def make_requirement(key: str, op: str, values: Iterable[str] | None) -> Requirement | None:
    """Build a requirement, or None where labels.NewRequirement would return an error."""
    given = list(values or ())
    if op in _SET_OPS:
        return Requirement(key, op, frozenset(given)) if given else None
    if op in _PRESENCE_OPS:
        return None if given else Requirement(key, op)
    if op in (GT, LT) and len(given) == 1:
        bound = parse_int64(given[0])
        return None if bound is None else Requirement(key, op, bound=bound)
    return None


def compile_label_selector(selector: LabelSelector | None) -> Selector:
    """LabelSelectorAsSelector: nil selects nothing, `{}` everything; Gt/Lt are not allowed."""
    if selector is None:
        return NOTHING
    requirements: list[Requirement] = [
        Requirement(key, IN, frozenset((value,)))
        for key, value in sorted((selector.match_labels or {}).items())
    ]
    for expression in selector.match_expressions or ():
        requirement = None
        if expression.operator in _SET_OPS or expression.operator in _PRESENCE_OPS:
            requirement = make_requirement(expression.key, expression.operator, expression.values)
        if requirement is None:
            return NOTHING
        requirements.append(requirement)
    return Selector(tuple(requirements))


def compile_node_requirements(requirements: Iterable[NodeSelectorRequirement]) -> Selector:
    """Node selector matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt) as a Selector."""
    compiled: list[Requirement] = []
    for requirement in requirements:
        made = make_requirement(requirement.key, requirement.operator, requirement.values)
        if made is None:
            return NOTHING
        compiled.append(made)
    return Selector(tuple(compiled))


def selector_from_map(labels: Mapping[str, str]) -> Selector:
    """A `nodeSelector` map as a Selector: every pair must be present."""
    return Selector(
        tuple(Requirement(key, IN, frozenset((value,))) for key, value in sorted(labels.items()))
    )
