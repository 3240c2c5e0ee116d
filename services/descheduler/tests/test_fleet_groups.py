"""RemovePodsViolatingFleetGroups: of the fleet group members piled on one ESXi host, one stays and
each other cluster moves its own; a target must hold no member of the group, and every
protection of the planner still holds."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from hostaffinity.affinity.fleet_groups import FleetMembers, stayer
from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    PlannerSettings,
)
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.fleet_groups import FleetGroups, FleetGroupsArgs
from hostaffinity.schema import LABEL_FLEET_GROUP, ReplicaPlacement, WorkloadPlacement
from tests.platform.builders.descheduler import cluster, decide_once, evicted, node, pod

HOSTS = {"n1": "esx-1", "n2": "esx-2", "n3": "esx-3", "n4": "esx-4"}


def member(name: str, node_name: str, group: str = "web", **kwargs: Any) -> DeschedulerPod:
    return pod(name, node_name, {LABEL_FLEET_GROUP: group, "app": name}, **kwargs)


def other(cluster_name: str, pod_name: str, host: str, group: str = "web") -> WorkloadPlacement:
    """Another install's workload as its placement summary reaches the fleet view."""
    return WorkloadPlacement(
        cluster=cluster_name,
        namespace="default",
        kind="Deployment",
        name=pod_name,
        fleet_group=group,
        replicas=[ReplicaPlacement(pod=pod_name, host_name=host, host_id=f"uuid/{host}")],
    )


def state_of(
    me: str,
    pods: list[DeschedulerPod],
    others: list[WorkloadPlacement],
    hosts: dict[str, str] = HOSTS,
) -> ClusterState:
    state = cluster([node(n) for n in hosts], pods, placements=hosts)
    state.fleet = FleetMembers(me)
    for summary in others:
        state.fleet.put(f"{summary.cluster}.workload.{summary.name}", summary)
    return state


def strategy(**args: object) -> FleetGroups:
    return FleetGroups(msgspec.convert(args, FleetGroupsArgs))


@pytest.mark.parametrize("index", range(12))
def test_of_two_clusters_members_on_one_host_exactly_one_is_evicted(index: int) -> None:
    """Each cluster's descheduler sees its own pod live and the other's through the fleet view;
    whatever the names, exactly one of the two evicts, and it is the one not staying."""
    mine, theirs = f"web-{index}", f"api-{index}"
    east = state_of("east", [member(mine, "n1")], [other("west", theirs, "esx-1")])
    west = state_of("west", [member(theirs, "n1")], [other("east", mine, "esx-1")])
    moves = {
        "east": evicted(decide_once(east, strategy())),
        "west": evicted(decide_once(west, strategy())),
    }
    stays = stayer("web", [("east", f"default/{mine}"), ("west", f"default/{theirs}")])
    moving = "west" if stays[0] == "east" else "east"
    assert moves[stays[0]] == []
    assert moves[moving] == [f"default/{mine if moving == 'east' else theirs}"]


def test_three_clusters_on_one_host_two_move_and_the_stayer_does_not() -> None:
    pods = {"east": "a-0", "west": "b-0", "north": "c-0"}
    members = [(c, f"default/{p}") for c, p in pods.items()]
    stays = stayer("web", members)
    moved = []
    for me, name in pods.items():
        others = [other(c, p, "esx-1") for c, p in pods.items() if c != me]
        moved += evicted(decide_once(state_of(me, [member(name, "n1")], others), strategy()))
    assert sorted(moved) == sorted(p for c, p in members if (c, p) != stays)


def _first_pair(stays_own: bool) -> tuple[str, str]:
    """Two of this cluster's pod names of which the first stays (or moves) on a shared host."""
    for a, b in itertools.permutations([f"web-{i}" for i in range(10)], 2):
        if (
            stayer("web", [("me", f"default/{a}"), ("me", f"default/{b}")])[1] == f"default/{a}"
        ) == stays_own:
            return a, b
    raise AssertionError("no such pair")


KEEP, MOVE = _first_pair(True)


@pytest.mark.parametrize(
    ("pods", "others", "expected", "why"),
    [
        pytest.param(
            [member(KEEP, "n1"), member(MOVE, "n2")],
            [other("east", "api-0", "esx-3")],
            [],
            None,
            id="every member on a host of its own: nothing to do",
        ),
        pytest.param(
            [member(KEEP, "n1"), member(MOVE, "n1")],
            [],
            [f"default/{MOVE}"],
            None,
            id="two of this cluster's members on one host: the one not staying moves",
        ),
        pytest.param(
            [member(KEEP, "n1"), member(MOVE, "n1", group="db")],
            [other("east", "api-0", "esx-1", group="api")],
            [],
            None,
            id="members of different groups may share a host",
        ),
        pytest.param(
            [member(KEEP, "n1"), member(MOVE, "n1", deleting=True)],
            [],
            [],
            None,
            id="a member already leaving does not count",
        ),
        pytest.param(
            [member(KEEP, "n1"), member(MOVE, "n1")],
            [
                other("east", "api-0", "esx-2"),
                other("west", "api-1", "esx-3"),
                other("north", "api-2", "esx-4"),
            ],
            [],
            "no other node fits: 3 would violate again",
            id="no host free of the group: the pod stays, reported",
        ),
        pytest.param(
            [member(KEEP, "n1"), member(MOVE, "n1", owner=None)],
            [],
            [],
            "pod has no owner",
            id="the DefaultEvictor's protections hold (a bare pod)",
        ),
    ],
)
def test_decisions(
    pods: list[DeschedulerPod],
    others: list[WorkloadPlacement],
    expected: list[str],
    why: str | None,
) -> None:
    plan = decide_once(state_of("me", pods, others), strategy())
    assert evicted(plan) == expected
    reasons = [reason for skip in plan.skipped for _, reason in skip.reasons]
    if why is None:
        assert reasons == []
    else:
        assert any(why in reason for reason in reasons), reasons


def test_the_target_is_a_host_free_of_every_member_of_the_group() -> None:
    """esx-2 and esx-3 hold other clusters' members, esx-1 this one's staying member: only
    esx-4 is free."""
    state = state_of(
        "me",
        [member(KEEP, "n1"), member(MOVE, "n1")],
        [other("east", "api-0", "esx-2"), other("west", "api-1", "esx-3")],
    )
    (action,) = decide_once(state, strategy()).actions
    assert (action.pod, action.target) == (f"default/{MOVE}", "n4")
    assert f"default/{KEEP} stays on the host" in action.why
    assert "fleet group web" in action.rule


def test_a_workload_cooling_down_keeps_its_pod_and_the_other_cluster_still_does_not_move() -> None:
    mine, theirs = "web-0", "api-0"
    stays = stayer("web", [("east", f"default/{mine}"), ("west", f"default/{theirs}")])
    me, them = ("west", "east") if stays[0] == "east" else ("east", "west")
    name, other_name = (theirs, mine) if me == "west" else (mine, theirs)
    state = state_of(me, [member(name, "n1")], [other(them, other_name, "esx-1")])
    planner = EvictionPlanner(PlannerSettings(cooldown_seconds=300), EvictionLimits())
    planner.record_evicted(state.workload_of(state.pods[f"default/{name}"]))
    plan = decide_once(state, strategy(), planner=planner)
    assert evicted(plan) == []
    assert "cooling down" in plan.skipped[0].reasons[0][1]


def test_excluded_namespaces_are_never_moved() -> None:
    state = state_of("me", [member(KEEP, "n1"), member(MOVE, "n1")], [])
    plan = decide_once(state, strategy(namespaces={"exclude": ["default"]}))
    assert evicted(plan) == []
    assert plan.skipped == []
