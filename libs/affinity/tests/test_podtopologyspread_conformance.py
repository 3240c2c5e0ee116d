"""kube-scheduler's own PodTopologySpread table tests, and our ESXi-host cases, against the engine.

Fixtures: tests/fixtures/kube-scheduler-podtopologyspread/ (see its README: provenance, the case
count, and the five upstream cases that v1.36 cannot express, which are checked to be exactly
those and to say why).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.platform.builders import spread_cases
from tests.platform.builders.spread_cases import Case

UPSTREAM = spread_cases.load("filtering.yaml") + spread_cases.load("scoring.yaml")
HOST_CASES = spread_cases.load("host-domain.yaml")
RUN = [c for c in UPSTREAM if "not_in_v1_36" not in c]
NOT_EXPRESSIBLE = [c for c in UPSTREAM if "not_in_v1_36" in c]


def test_every_upstream_case_is_carried_over() -> None:
    """136 table cases in filtering_test.go and scoring_test.go (README), 5 not v1.36's."""
    counts = Counter(c["test"] for c in UPSTREAM)
    assert counts == {
        "TestPreFilterState": 35,
        "TestPreFilterStateAddPod": 16,
        "TestPreFilterStateRemovePod": 9,
        "TestSingleConstraint": 23,
        "TestMultipleConstraints": 11,
        "TestPreFilterDisabled": 1,
        "TestPreScoreSkip": 2,
        "TestPreScoreStateEmptyNodes": 12,
        "TestPodTopologySpreadScore": 27,
    }
    assert sorted(c["id"] for c in NOT_EXPRESSIBLE) == [
        "TestPodTopologySpreadScore/matchLabelKeys ignored when feature gate disabled",
        "TestPreFilterDisabled/Filter without PreFilter",
        "TestPreFilterState/matchLabelKeys ignored when feature gate disabled",
        "TestPreFilterStateRemovePod/remove a pod when scheduling node affinity matched pod "
        "with NodeInclusionPolicy disabled",
        "TestPreFilterStateRemovePod/remove a pod when scheduling node affinity matched pod "
        "with NodeInclusionPolicy enabled",
    ]
    assert all(len(c["not_in_v1_36"]) > 40 for c in NOT_EXPRESSIBLE)


def _check_prefilter(case: Case, want: Any) -> None:
    engine, pod = spread_cases.cluster(case)
    mode = spread_cases.mode_of(case)
    if want == "skip":
        assert engine.hard_spreads(pod, mode) == []
        return
    state = engine.spread_counts(pod, mode)
    assert [spread_cases.described(c) for c, _ in state] == spread_cases.expected_constraints(
        want["constraints"]
    )
    by_key = {counts.key: counts for _, counts in state}
    assert set(by_key) == set(want["min"])
    for key, counts in by_key.items():
        expected = want["match"].get(key, {})
        assert counts.counts == {v: n for v, n in expected.items() if n}, key
        assert counts.domains == want["domains"].get(key, 0) == len(expected), key
        assert counts.global_min == want["min"][key], key


def _check_prescore(case: Case, want: Any) -> None:
    engine, pod = spread_cases.cluster(case)
    state = engine.spread_prescore(pod, spread_cases.candidates(case))
    if want == "skip":
        assert state is None
        return
    assert state is not None
    assert [spread_cases.described(p.constraint) for p in state.parts] == (
        spread_cases.expected_constraints(want["constraints"])
    )
    assert sorted(state.ignored) == want["ignored"]
    for part, counts, size in zip(state.parts, want["counts"], want["sizes"], strict=True):
        assert part.size == size
        if counts is None:
            assert part.per_node
        else:
            assert part.domains == set(counts)
            assert part.counts == {v: n for v, n in counts.items() if n}


def _check(case: Case) -> None:
    want = case["want"]
    if "prefilter" in want:
        _check_prefilter(case, want["prefilter"])
    if "prescore" in want:
        _check_prescore(case, want["prescore"])
    if "filter" in want:
        engine, pod = spread_cases.cluster(case)
        verdicts = spread_cases.plugin_verdicts(engine, pod, spread_cases.mode_of(case))
        assert verdicts == want["filter"]
    if "scores" in want:
        engine, pod = spread_cases.cluster(case)
        nodes = spread_cases.candidates(case)
        result = engine.score(pod, nodes, mode=spread_cases.mode_of(case))
        assert dict(zip(nodes, result.topology_spread.over(nodes), strict=True)) == want["scores"]
    if "feasible" in want:
        engine, pod = spread_cases.cluster(case)
        result = engine.filter(pod, mode=spread_cases.mode_of(case))
        assert result.feasible == want["feasible"]
        assert result.summary() == want["summary"]


@pytest.mark.parametrize("case", RUN, ids=[c["id"] for c in RUN])
def test_upstream_case(case: Case) -> None:
    _check(case)


@pytest.mark.parametrize("case", HOST_CASES, ids=[c["id"] for c in HOST_CASES])
def test_host_domain_case(case: Case) -> None:
    _check(case)
