"""RemoveDuplicates' bookkeeping: which workloads a pass after some changes must group again."""

from __future__ import annotations

import msgspec
import pytest

from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.crowded import CrowdedWorkloads
from tests.platform.builders.descheduler import ESXI, cluster, node, pod

A, B, C = (f"default/ReplicaSet/{name}" for name in ("a", "b", "c"))


def _state() -> ClusterState:
    """a is crowded on n1; b and c have one replica per node."""
    return cluster(
        [node(f"n{i}", {ESXI: f"esx-{i}"}) for i in range(1, 5)],
        [
            pod("a1", "n1", owner=("ReplicaSet", "a")),
            pod("a2", "n1", owner=("ReplicaSet", "a")),
            pod("b1", "n2", owner=("ReplicaSet", "b")),
            pod("b2", "n3", owner=("ReplicaSet", "b")),
            pod("c1", "n4", owner=("ReplicaSet", "c")),
        ],
    )


def _learned(state: ClusterState) -> CrowdedWorkloads:
    crowded = CrowdedWorkloads()
    assert crowded.to_judge(state, full=False) is None  # never judged: every workload
    crowded.found({A})
    assert crowded.to_judge(state, full=False) == {A}
    crowded.found({A})
    return crowded


def _on(replica: DeschedulerPod, node_name: str) -> DeschedulerPod:
    return msgspec.structs.replace(
        replica, spec=msgspec.structs.replace(replica.spec, node_name=node_name)
    )


def test_a_replica_placed_or_moved_has_its_workload_judged() -> None:
    state = _state()
    crowded = _learned(state)
    state.upsert_pod(_on(state.pods["default/b2"], "n2"))
    assert crowded.to_judge(state, full=False) == {A, B}
    crowded.found({A, B})
    state.upsert_pod(pod("c2", "n1", owner=("ReplicaSet", "c")))
    assert crowded.to_judge(state, full=False) == {A, B, C}


def test_a_replica_leaving_crowds_nothing() -> None:
    state = _state()
    crowded = _learned(state)
    state.remove_pod("default/b1")
    assert crowded.to_judge(state, full=False) == {A}


def test_a_pod_whose_owner_changed_is_judged_in_its_new_workload() -> None:
    state = _state()
    crowded = _learned(state)
    state.upsert_pod(pod("b1", "n2", owner=("ReplicaSet", "c")))
    assert crowded.to_judge(state, full=False) == {A, C}


def test_a_changed_node_has_the_workloads_of_its_pods_judged() -> None:
    """Relabelled (its esxi-host label), its VM moved, deleted and added back."""
    state = _state()
    crowded = _learned(state)
    state.upsert_node(node("n3", {ESXI: "esx-2"}))
    assert crowded.to_judge(state, full=False) == {A, B}
    crowded.found({A})
    state.set_placement("n4", "esx-1")
    assert crowded.to_judge(state, full=False) == {A, C}
    crowded.found({A})
    state.remove_node("n2")
    state.upsert_node(node("n2", {ESXI: "esx-2"}))
    assert crowded.to_judge(state, full=False) == {A, B}


def test_moves_planned_in_the_cycle_are_judged_then_and_once_put_back() -> None:
    state = _state()
    crowded = _learned(state)
    with state.scratch() as scratch:
        scratch.move("default/c1", "n2")
        assert crowded.to_judge(state, full=False) == {A, C}
        crowded.found({A})
    assert crowded.to_judge(state, full=False) == {A, C}


def test_a_full_pass_or_another_state_judges_every_workload() -> None:
    state = _state()
    crowded = _learned(state)
    assert crowded.to_judge(state, full=True) is None
    crowded.found({A})
    assert crowded.to_judge(_state(), full=False) is None


def test_more_node_changes_than_the_journal_keeps_judge_every_workload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _state()
    crowded = _learned(state)
    monkeypatch.setattr(state, "NODE_CHANGES_KEPT", 1)
    for host in ("esx-7", "esx-8", "esx-9"):
        state.set_placement("n4", host)
    assert crowded.to_judge(state, full=False) is None
