"""Sparse scores: nodes without a raw score count as 0, exactly as a dense per-node map would."""

from __future__ import annotations

from hostaffinity.affinity.engine import FilterMode
from hostaffinity.affinity.scoring import (
    SparseScores,
    combine,
    normalize_default,
    normalize_min_max,
)
from tests.platform.builders.affinity import engine, expr, node, pod, preferred, term


def dense(scores: SparseScores, nodes: list[str]) -> dict[str, int]:
    return dict(zip(nodes, scores.over(nodes), strict=True))


def test_min_max_counts_the_nodes_without_a_raw_score_as_zero() -> None:
    raw = SparseScores(0, {"a": 5, "b": 10})
    assert dense(normalize_min_max(raw, 3), ["a", "b", "c"]) == {"a": 50, "b": 100, "c": 0}
    assert dense(normalize_min_max(raw, 2), ["a", "b"]) == {"a": 0, "b": 100}
    negative = SparseScores(0, {"a": -10})
    assert dense(normalize_min_max(negative, 2), ["a", "b"]) == {"a": 0, "b": 100}


def test_default_normalization_reversed_and_not() -> None:
    raw = SparseScores(0, {"a": 1, "b": 2})
    assert dense(normalize_default(raw, 3, reverse=True), ["a", "b", "c"]) == {
        "a": 50,
        "b": 0,
        "c": 100,
    }
    assert dense(normalize_default(SparseScores(0), 2, reverse=False), ["a", "b"]) == {
        "a": 0,
        "b": 0,
    }


def test_combine_applies_the_formula_per_node_over_every_varying_part() -> None:
    first = SparseScores(1, {"a": 10, "b": 10})
    second = SparseScores(2, {"b": 20, "c": 30})
    fixed = SparseScores(5)
    total = combine(lambda x, y, z: 100 * x + 10 * y + z, first, second, fixed)
    assert dense(total, ["a", "b", "c", "d"]) == {"a": 1025, "b": 1205, "c": 405, "d": 125}


def test_terms_on_two_keys_add_up_on_a_node_in_both_domains() -> None:
    nodes = [
        node("n1", {"zone": "z1", "rack": "r1"}),
        node("n2", {"zone": "z1", "rack": "r2"}),
        node("n3", {"zone": "z2", "rack": "r1"}),
        node("n4", {"zone": "z2", "rack": "r2"}),
    ]
    existing = [pod("p1", labels={"app": "db"}, node_name="n1")]
    selector = {"matchExpressions": [expr("app", "In", "db")]}
    rule = preferred("podAffinity", (3, term("zone", selector)), (1, term("rack", selector)))
    # Raw: n1 4, n2 3, n3 1, n4 0; "ghost" is unknown and "n2" asked twice.
    result = engine(nodes, existing).score(pod(affinity=rule), ["n1", "n2", "ghost", "n3", "n2"])
    assert result.nodes == ["n1", "n2", "n3", "n2"]
    assert {n: s.inter_pod_affinity for n, s in result.scores.items()} == {
        "n1": 100,
        "n2": 66,
        "n3": 0,
    }
    assert result.extender_priorities() == {"n1": 7, "n2": 6, "n3": 4}
    physical = engine(nodes, existing).score(pod(affinity=rule), ["n1"], mode=FilterMode.PHYSICAL)
    assert physical.extender_priorities() == {"n1": 0}
