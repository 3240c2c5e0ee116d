"""A filter's rejections read on demand: the same answers as a map built stage by stage, where the
first stage that fails a node names its reason, and only asked nodes are rejected."""

from __future__ import annotations

from collections.abc import Set

import pytest

from hostaffinity.affinity import explain
from hostaffinity.affinity.explain import Rejection
from hostaffinity.affinity.rejections import Rejections, Stage

ZONE_A = {"n1", "n2", "n3"}
TAINTED = {"n3", "n4"}
CORDONED = explain.cordoned()
TAINT = explain.unknown_node()  # any distinct Rejection will do
ZONE = explain.unplaced("hostaffinity.io/esxi-host")
# The zone's set fails the pod twice (its own term, then a replica's): the same object.
STAGES: list[Stage] = [
    (frozenset(), CORDONED),
    (TAINTED, TAINT),
    (ZONE_A, ZONE),
    (ZONE_A, CORDONED),
]


def first_wins(stages: list[Stage], asked: Set[str] | None) -> dict[str, Rejection]:
    expected: dict[str, Rejection] = {}
    for failing, why in stages:
        for node in failing:
            if asked is None or node in asked:
                expected.setdefault(node, why)
    return expected


@pytest.mark.parametrize("asked", [None, {"n1", "n4", "n9"}, {"n9"}, set()])
def test_lookups_before_and_after_the_map_is_built_agree_with_first_stage_wins(
    asked: set[str] | None,
) -> None:
    expected = first_wins(STAGES, asked)
    lazy = Rejections(STAGES, asked)
    assert bool(lazy) == bool(expected)
    assert lazy.nodes() == set(expected)
    for node in ("n1", "n2", "n3", "n4", "n9"):
        assert lazy.get(node) == expected.get(node)
        assert (node in lazy) == (node in expected)
    assert dict(lazy) == expected  # built now, once
    assert len(lazy) == len(expected)
    assert lazy.nodes() == set(expected)
    assert [lazy.get(node) for node in ("n1", "n3", "n9")] == [
        expected.get(node) for node in ("n1", "n3", "n9")
    ]
