"""Hypothesis strategies for pod affinity terms: the engine's property tests and the webhook's."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from hostaffinity.schema.names import LABEL_ESXI_HOST, LABEL_LEGACY_HOST

NAMESPACES = {"ns1": {"team": "a"}, "ns2": {"team": "b", "env": "prod"}, "ns3": {}}
TOPOLOGY_KEYS = ["zone", "kubernetes.io/hostname", LABEL_ESXI_HOST, LABEL_LEGACY_HOST]


@st.composite
def selectors(draw: st.DrawFn, keys: list[str], values: list[str]) -> dict[str, Any] | None:
    kind = draw(st.sampled_from(["null", "empty", "labels", "expressions"]))
    if kind == "null":
        return None
    if kind == "empty":
        return {}
    if kind == "labels":
        return {"matchLabels": {draw(st.sampled_from(keys)): draw(st.sampled_from(values))}}
    expressions = []
    for _ in range(draw(st.integers(1, 2))):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        expression: dict[str, Any] = {"key": draw(st.sampled_from(keys)), "operator": op}
        if op in ("In", "NotIn"):
            expression["values"] = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2))
        expressions.append(expression)
    return {"matchExpressions": expressions}


@st.composite
def pod_terms(draw: st.DrawFn) -> dict[str, Any]:
    term: dict[str, Any] = {"topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS))}
    label_selector = draw(selectors(["app", "tier"], ["a", "b", "c", "x"]))
    if label_selector is not None:
        term["labelSelector"] = label_selector
    if draw(st.booleans()):
        term["namespaces"] = draw(st.lists(st.sampled_from([*NAMESPACES, "gone"]), max_size=2))
    if draw(st.booleans()):
        term["namespaceSelector"] = draw(selectors(["team", "env"], ["a", "b", "prod"]))
    return term
