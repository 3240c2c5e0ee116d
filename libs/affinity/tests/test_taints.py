"""Taints, tolerations and cordoned nodes, re-creating upstream's plugin test scenarios.

Ids name the upstream file and case: pkg/scheduler/framework/plugins/tainttoleration/
taint_toleration_test.go and nodeunschedulable/node_unschedulable_test.go (v1.36).
"""

from __future__ import annotations

from typing import Any

import pytest

from hostaffinity.affinity.explain import REASON_TAINT, REASON_UNSCHEDULABLE
from tests.platform.builders.affinity import engine, node, pod

FILTER = "taint_toleration_test.go:TestTaintTolerationFilter/"
DEDICATED = {"key": "dedicated", "value": "user1", "effect": "NoSchedule"}


def taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def toleration(key: str, op: str, value: str = "", effect: str = "") -> dict[str, Any]:
    return {"key": key, "operator": op, "value": value, "effect": effect}


FILTER_CASES = [
    pytest.param(
        [],
        [DEDICATED],
        False,
        id=FILTER + "A pod having no tolerations can't be scheduled "
        "onto a node with nonempty taints",
    ),
    pytest.param(
        [toleration("dedicated", "Equal", "user1", "NoSchedule")],
        [DEDICATED],
        True,
        id=FILTER + "A pod which can be scheduled on a dedicated node assigned to user1 with "
        "effect NoSchedule",
    ),
    pytest.param(
        [toleration("dedicated", "Equal", "user2", "NoSchedule")],
        [DEDICATED],
        False,
        id=FILTER + "A pod which can't be scheduled on a dedicated node assigned to user2 with "
        "effect NoSchedule",
    ),
    pytest.param(
        [toleration("foo", "Exists", effect="NoSchedule")],
        [taint("foo", "bar", "NoSchedule")],
        True,
        id=FILTER + "A pod can be scheduled onto the node, with a toleration uses operator Exists "
        "that tolerates the taints on the node",
    ),
    pytest.param(
        [
            toleration("dedicated", "Equal", "user2", "NoSchedule"),
            toleration("foo", "Exists", effect="NoSchedule"),
        ],
        [taint("dedicated", "user2", "NoSchedule"), taint("foo", "bar", "NoSchedule")],
        True,
        id=FILTER + "A pod has multiple tolerations, node has multiple taints, all the taints are "
        "tolerated, pod can be scheduled onto the node",
    ),
    pytest.param(
        [toleration("foo", "Equal", "bar", "PreferNoSchedule")],
        [taint("foo", "bar", "NoSchedule")],
        False,
        id=FILTER + "A pod has a toleration that keys and values match the taint on the node, but "
        "(non-empty) effect doesn't match, can't be scheduled onto the node",
    ),
    pytest.param(
        [toleration("foo", "Equal", "bar")],
        [taint("foo", "bar", "NoSchedule")],
        True,
        id=FILTER + "The pod has a toleration that keys and values match the taint on the node, "
        "the effect of toleration is empty, and the effect of taint is NoSchedule. Pod can be "
        "scheduled onto the node",
    ),
    pytest.param(
        [toleration("dedicated", "Equal", "user2", "NoSchedule")],
        [taint("dedicated", "user1", "PreferNoSchedule")],
        True,
        id=FILTER + "The pod has a toleration that key and value don't match the taint on the "
        "node, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto "
        "the node",
    ),
    pytest.param(
        [],
        [taint("dedicated", "user1", "PreferNoSchedule")],
        True,
        id=FILTER + "The pod has no toleration, but the effect of taint on node is "
        "PreferNoSchedule. Pod can be scheduled onto the node",
    ),
    pytest.param(
        [toleration("", "Exists")],
        [taint("gpu", "x", "NoExecute"), DEDICATED],
        True,
        id="toleration.go:ToleratesTaint/empty key with Exists tolerates everything",
    ),
    pytest.param(
        [toleration("", "Exists", effect="NoSchedule")],
        [taint("gpu", "x", "NoExecute")],
        False,
        id="toleration.go:ToleratesTaint/empty key with an effect tolerates only that effect",
    ),
    pytest.param(
        [toleration("gpu", "Equal")],
        [taint("gpu", "", "NoExecute")],
        True,
        id="toleration.go:ToleratesTaint/Equal with no value matches a taint with no value",
    ),
]


@pytest.mark.parametrize(("tolerations", "taints", "fits"), FILTER_CASES)
def test_taint_toleration_filter(
    tolerations: list[dict[str, Any]], taints: list[dict[str, str]], fits: bool
) -> None:
    result = engine([node("nodeA", taints=taints)]).filter(pod(tolerations=tolerations))
    assert (result.feasible == ["nodeA"]) is fits
    if not fits:
        rejection = result.rejected["nodeA"]
        assert rejection.reason == REASON_TAINT
        assert rejection.unresolvable
        assert "the node has taint" in rejection.message


def test_message_names_the_taint() -> None:
    result = engine([node("nodeA", taints=[DEDICATED])]).filter(pod())
    assert "dedicated=user1:NoSchedule" in result.rejected["nodeA"].message


def test_score_counts_untolerated_prefer_no_schedule() -> None:
    """taint_toleration_test.go:TestTaintTolerationScore, 'the more intolerable taints...'."""
    nodes = [
        node("nodeA"),
        node("nodeB", taints=[taint("cpu-type", "arm64", "PreferNoSchedule")]),
        node(
            "nodeC",
            taints=[
                taint("cpu-type", "arm64", "PreferNoSchedule"),
                taint("disk-type", "ssd", "PreferNoSchedule"),
            ],
        ),
    ]
    tolerations = [toleration("foo", "Equal", "bar", "PreferNoSchedule")]
    scores = engine(nodes).score(pod(tolerations=tolerations), ["nodeA", "nodeB", "nodeC"])
    assert [scores.scores[n].taint_toleration for n in ("nodeA", "nodeB", "nodeC")] == [100, 50, 0]


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        pytest.param([], False, id="node_unschedulable_test.go:TestNodeUnschedulable/cordoned"),
        pytest.param(
            [toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule")],
            True,
            id="node_unschedulable_test.go:TestNodeUnschedulable/tolerates the unschedulable taint",
        ),
    ],
)
def test_cordoned_node(tolerations: list[dict[str, Any]], fits: bool) -> None:
    result = engine([node("n1", unschedulable=True)]).filter(pod(tolerations=tolerations))
    assert (result.feasible == ["n1"]) is fits
    if not fits:
        assert result.rejected["n1"].reason == REASON_UNSCHEDULABLE
