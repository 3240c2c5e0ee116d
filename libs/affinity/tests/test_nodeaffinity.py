"""NodeAffinity and nodeSelector, re-creating upstream's plugin test scenarios.

Ids name the upstream file and case: pkg/scheduler/framework/plugins/nodeaffinity/
node_affinity_test.go (v1.36).
"""

from __future__ import annotations

from typing import Any

import pytest

from hostaffinity.affinity.explain import REASON_NODE_AFFINITY, REASON_NODE_NAMES
from tests.platform.builders.affinity import engine, expr, node, pod

UPSTREAM = "node_affinity_test.go:TestNodeAffinity/"


def required_terms(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


CASES = [
    pytest.param(None, {"foo": "bar"}, {}, False, id=UPSTREAM + "missing labels"),
    pytest.param(None, {"foo": "bar"}, {"foo": "bar"}, True, id=UPSTREAM + "same labels"),
    pytest.param(
        None,
        {"foo": "bar"},
        {"foo": "bar", "baz": "blah"},
        True,
        id=UPSTREAM + "node labels are superset",
    ),
    pytest.param(
        None,
        {"foo": "bar", "baz": "blah"},
        {"foo": "bar"},
        False,
        id=UPSTREAM + "node labels are subset",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("foo", "In", "bar", "value2")]}),
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with matchExpressions using In operator that matches the existing node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("kernel-version", "Gt", "0204")]}),
        None,
        {"kernel-version": "0206"},
        True,
        id=UPSTREAM + "Pod with matchExpressions using Gt operator that matches the existing node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("mem-type", "NotIn", "DDR", "DDR2")]}),
        None,
        {"mem-type": "DDR3"},
        True,
        id=UPSTREAM
        + "Pod with matchExpressions using NotIn operator that matches the existing node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("GPU", "Exists")]}),
        None,
        {"GPU": "NVIDIA-GRID-K1"},
        True,
        id=UPSTREAM
        + "Pod with matchExpressions using Exists operator that matches the existing node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("foo", "In", "value1", "value2")]}),
        None,
        {"foo": "bar"},
        False,
        id=UPSTREAM
        + "Pod with affinity that don't match node's labels won't schedule onto the node",
    ),
    pytest.param(
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        None,
        {"foo": "bar"},
        False,
        id=UPSTREAM
        + "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels "
        "and won't schedule onto the node",
    ),
    pytest.param(
        required_terms({}),
        None,
        {"foo": "bar"},
        False,
        id=UPSTREAM + "Pod with empty MatchExpressions is not a valid value will match no objects "
        "and won't schedule onto the node",
    ),
    pytest.param(
        None, None, {"foo": "bar"}, True, id=UPSTREAM + "Pod with no Affinity will schedule"
    ),
    pytest.param(
        {"nodeAffinity": {}},
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with Affinity but nil NodeSelector will schedule onto a node",
    ),
    pytest.param(
        required_terms(
            {"matchExpressions": [expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")]}
        ),
        None,
        {"GPU": "NVIDIA-GRID-K1"},
        True,
        id=UPSTREAM + "Pod with multiple matchExpressions ANDed that matches the existing node",
    ),
    pytest.param(
        required_terms(
            {"matchExpressions": [expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")]}
        ),
        None,
        {"GPU": "NVIDIA-GRID-K1"},
        False,
        id=UPSTREAM
        + "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
    ),
    pytest.param(
        required_terms(
            {"matchExpressions": [expr("foo", "In", "bar", "value2")]},
            {"matchExpressions": [expr("diffkey", "In", "wrong", "value2")]},
        ),
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's "
        "labels and will schedule onto the node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("foo", "Exists")]}),
        {"foo": "bar"},
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are "
        "deprecating) both are satisfied, will schedule onto the node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("foo", "Exists")]}),
        {"foo": "bar"},
        {"foo": "barrrrrr"},
        False,
        id=UPSTREAM + "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the "
        "old thing that we are deprecating) is not satisfied, won't schedule onto the node",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("foo", "NotIn", "invalid value: ___@#$%^")]}),
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with an invalid value in Affinity term won't be scheduled onto the node "
        "(we accept the value: the API server validates label values)",
    ),
    pytest.param(
        required_terms({"matchFields": [expr("metadata.name", "In", "node1")]}),
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with matchFields using In operator that matches the existing node",
    ),
    pytest.param(
        required_terms(
            {"matchFields": [expr("metadata.name", "In", "node2")]},
            {"matchExpressions": [expr("foo", "In", "bar")]},
        ),
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM
        + "Pod with two terms: matchFields does not match, but matchExpressions matches",
    ),
    pytest.param(
        required_terms(
            {
                "matchFields": [expr("metadata.name", "In", "node1")],
                "matchExpressions": [expr("foo", "In", "bar")],
            }
        ),
        None,
        {"foo": "bar"},
        True,
        id=UPSTREAM + "Pod with one term: both matchFields and matchExpressions match",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("perf", "Lt", "5")]}),
        None,
        {"perf": "5"},
        False,
        id="nodeaffinity_test.go:TestNodeSelectorMatch/Lt is strict",
    ),
    pytest.param(
        required_terms({"matchExpressions": [expr("perf", "Gt", "1")]}),
        None,
        {"perf": "1_0"},
        False,
        id="nodeaffinity_test.go:TestNodeSelectorMatch/Gt needs a Go integer label",
    ),
]


@pytest.mark.parametrize(("affinity", "node_selector", "labels", "fits"), CASES)
def test_node_affinity(
    affinity: dict[str, Any] | None,
    node_selector: dict[str, str] | None,
    labels: dict[str, str],
    fits: bool,
) -> None:
    cluster = engine([node("node1", labels)])
    result = cluster.filter(pod(affinity=affinity, node_selector=node_selector))
    assert (result.feasible == ["node1"]) is fits
    if not fits:
        rejection = result.rejected["node1"]
        assert rejection.reason == REASON_NODE_AFFINITY
        assert rejection.unresolvable


@pytest.mark.parametrize(
    ("names", "feasible", "left_out"),
    [
        pytest.param(["node1"], ["node1"], ["node2", "node3"], id=UPSTREAM[:-1] + "PreFilter/In"),
        pytest.param([], [], ["node1", "node2", "node3"], id="node_affinity.go:PreFilter/conflict"),
    ],
)
def test_match_fields_prefilter_narrows_the_nodes(
    names: list[str], feasible: list[str], left_out: list[str]
) -> None:
    cluster = engine([node(f"node{i}", {"kubernetes.io/hostname": f"node{i}"}) for i in (1, 2, 3)])
    fields = [expr("metadata.name", "In", n) for n in names] or [
        expr("metadata.name", "In", "node1"),
        expr("metadata.name", "In", "node2"),
    ]
    result = cluster.filter(pod(affinity=required_terms({"matchFields": fields})))
    assert result.feasible == feasible
    assert sorted(result.rejected) == left_out
    if names:
        assert result.rejected["node2"].reason == REASON_NODE_NAMES


def test_message_names_the_rule() -> None:
    cluster = engine([node("n1", {"disktype": "hdd"})])
    result = cluster.filter(pod(node_selector={"disktype": "ssd"}))
    assert "nodeSelector {disktype=ssd}" in result.rejected["n1"].message


def test_preferred_node_affinity_scores_by_weight() -> None:
    """node_affinity_test.go:TestNodeAffinityPriority, 'all nodes matches the preferred terms'."""
    preference = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", "bar")]}},
                {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", "value")]}},
            ]
        }
    }
    nodes = [node("a", {"foo": "bar"}), node("b", {"foo": "bar", "key": "value"}), node("c")]
    scores = engine(nodes).score(pod(affinity=preference), ["a", "b", "c"]).scores
    assert [scores[n].node_affinity for n in "abc"] == [33, 100, 0]
