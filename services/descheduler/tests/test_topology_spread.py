"""RemovePodsViolatingTopologySpreadConstraint, table-driven, through one planner cycle.

The tables carry the intent of upstream's cases (kubernetes-sigs/descheduler v0.36,
pkg/framework/plugins/removepodsviolatingtopologyspreadconstraint/topologyspreadconstraint_test.go:
the domain sizes and how many pods move); the clusters are written here. Differences are ours on
purpose: node fit always holds, and a pod moves only to a domain below the ideal average.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    PlannerSettings,
)
from hostaffinity.descheduler.core.model import DeschedulerNode, DeschedulerPod
from hostaffinity.descheduler.core.policy import PolicyError, load_policy
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies import StrategyArgsError, build_strategy
from hostaffinity.descheduler.core.strategies.topology_spread import (
    TopologySpread,
    TopologySpreadArgs,
    balance_domains,
)
from tests.platform.builders.descheduler import (
    ESXI,
    HOSTNAME,
    cluster,
    decide_once,
    evicted,
    launcher,
    node,
    pod,
    spread,
    vmi,
)
from tests.recorded_fixtures import fixture_dir

ZONE = "topology.kubernetes.io/zone"
WEB = {"app": "web"}
PHYSICAL = {"hostaffinity.io/physical-anti-affinity": "true"}
TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
PluginArgs = Mapping[str, Any]


def plugin(**args: Any) -> TopologySpread:
    strategy = build_strategy(TopologySpread.name, args)
    assert isinstance(strategy, TopologySpread)
    return strategy


@dataclass
class Zones:
    """One node per zone `z<i>` holding `sizes[i]` replicas of app=web with one zone spread."""

    sizes: list[int]
    max_skew: int = 1
    when: str = "DoNotSchedule"
    constraint: dict[str, Any] = field(default_factory=dict)
    node_extra: Callable[[int], dict[str, Any]] = lambda _i: {}
    pod_extra: Callable[[int, int], dict[str, Any]] = lambda _zone, _replica: {}

    def nodes(self) -> list[DeschedulerNode]:
        return [
            node(f"n{i}", cpu="64", **{"labels": {ZONE: f"z{i}"}, **self.node_extra(i)})
            for i in range(len(self.sizes))
        ]

    def pods(self) -> list[DeschedulerPod]:
        written = spread(ZONE, self.max_skew, self.when, **self.constraint)
        return [
            pod(
                f"p{i}-{r}",
                f"n{i}",
                WEB,
                topology_spread=[written],
                **{"created_minutes_ago": 100 - r, **self.pod_extra(i, r)},
            )
            for i, size in enumerate(self.sizes)
            for r in range(size)
        ]


def _bound_to_own_node(zone: int, replica: int) -> dict[str, Any]:
    return {"node_selector": {HOSTNAME: f"n{zone}"}} if replica % 2 == 0 else {}


CASES: dict[str, tuple[Zones, PluginArgs, int]] = {
    "2 domains [3,1] maxSkew 1: 1 moves to [2,2]": (Zones([3, 1]), {}, 1),
    "2 domains [5,2] maxSkew 1: 1 moves to [4,3]": (Zones([5, 2]), {}, 1),
    "2 domains [4,0] maxSkew 1: 2 move to [2,2]": (Zones([4, 0]), {}, 2),
    "2 domains [0,4] maxSkew 1: 2 move to [2,2]": (Zones([0, 4]), {}, 2),
    "2 domains [2,6] maxSkew 2: 1 moves to [3,5]": (Zones([2, 6], max_skew=2), {}, 1),
    "3 domains [0,1,100]: 66 move to [34,33,34]": (Zones([0, 1, 100]), {}, 66),
    "4 domains [0,1,3,5]: 3 move to [2,2,3,2]": (Zones([0, 1, 3, 5]), {}, 3),
    "balanced [2,1,2]: nothing": (Zones([2, 1, 2]), {}, 0),
    "[4,0], two bound to their node by nodeSelector: the two free ones move": (
        Zones([4, 0], pod_extra=_bound_to_own_node),
        {},
        2,
    ),
    "[4,0], three bound to their node: only the free one can move": (
        Zones([4, 0], pod_extra=lambda z, r: _bound_to_own_node(z, 0) if r else {}),
        {},
        1,
    ),
    "[2,0], the small domain tainted and not tolerated: nothing (node fit)": (
        Zones([2, 0], node_extra=lambda i: {"taints": [TAINT]} if i == 1 else {}),
        {},
        0,
    ),
    "[2,0], the taint tolerated: 1 moves": (
        Zones(
            [2, 0],
            node_extra=lambda i: {"taints": [TAINT]} if i == 1 else {},
            pod_extra=lambda _z, _r: {"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
        ),
        {},
        1,
    ),
    "[2,0] ScheduleAnyway with the default constraints: nothing": (
        Zones([3, 0], when="ScheduleAnyway"),
        {},
        0,
    ),
    "[3,0] ScheduleAnyway with constraints [DoNotSchedule, ScheduleAnyway]: 1 moves": (
        Zones([3, 0], when="ScheduleAnyway"),
        {"constraints": ["DoNotSchedule", "ScheduleAnyway"]},
        1,
    ),
    "[3,0] ScheduleAnyway with the deprecated includeSoftConstraints: 1 moves": (
        Zones([3, 0], when="ScheduleAnyway"),
        {"includeSoftConstraints": True},
        1,
    ),
    "[4,0] pods outside the namespaces arg: nothing": (
        Zones([4, 0]),
        {"namespaces": {"include": ["other"]}},
        0,
    ),
    "[4,0] pods outside the labelSelector arg: nothing": (
        Zones([4, 0]),
        {"labelSelector": {"matchLabels": {"app": "db"}}},
        0,
    ),
    "[4,0] a nodeAffinityPolicy Honor spread leaves out a domain the pods cannot use": (
        Zones(
            [4, 0, 0],
            node_extra=lambda i: {} if i == 2 else {"labels": {ZONE: f"z{i}", "pool": "a"}},
            pod_extra=lambda _z, _r: {"node_selector": {"pool": "a"}},
        ),
        {},
        2,
    ),
    "[3,1,0] the empty zone's node is not Ready: nothing (kube-scheduler counts it)": (
        Zones([3, 1, 0], node_extra=lambda i: {"ready": i != 2}),
        {},
        0,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_balancing(case: str) -> None:
    zones, args, expected = CASES[case]
    state = cluster(zones.nodes(), zones.pods())
    plan = decide_once(state, plugin(**args))
    assert len(plan.actions) == expected, [s.reasons for s in plan.skipped]
    for action in plan.actions:
        assert action.strategy == TopologySpread.name
        assert "topology spread of default/" in action.rule


def test_moves_end_balanced_and_the_large_domains_never_go_below_the_ideal() -> None:
    zones = Zones([0, 1, 100])
    state = cluster(zones.nodes(), zones.pods())
    plan = decide_once(state, plugin())
    after = [0, 1, 100]
    for action in plan.actions:
        after[int(action.node[1:])] -= 1
        after[int(action.target[1:])] += 1
    assert sorted(after) == [33, 34, 34]  # upstream's note: [34, 33, 34]; same sizes


@pytest.mark.parametrize(
    ("sizes", "max_skew", "moved"),
    [
        ([2, 3, 5, 5, 7, 8], 1, 5),  # upstream's comment: ends [5, 5, 5, 5, 5, 5]
        ([0, 0, 10], 1, 7),  # ceil rounding overshoots to [4,3,3]; node fit stops the 7th
        ([1, 1, 1], 1, 0),
        ([0, 9], 3, 3),
    ],
)
def test_balance_domains_alone(sizes: list[int], max_skew: int, moved: int) -> None:
    pods = [[f"p{i}-{r}" for r in range(s)] for i, s in enumerate(sizes)]
    ideal = sum(sizes) / len(sizes)
    moves = balance_domains(sizes, pods, ideal, max_skew)
    assert len(moves) == moved
    assert len({pod_key for pod_key, _ in moves}) == moved, "a pod moves once"
    left = list(sizes)
    for pod_key, source in moves:
        assert pod_key in pods[source]
        left[source] -= 1
    assert all(left[i] >= min(size, int(ideal)) for i, size in enumerate(sizes))


def test_the_newest_lowest_priority_pod_goes_first() -> None:
    zones = Zones(
        [3, 0],
        pod_extra=lambda _z, r: {"priority": 10 if r == 0 else 100, "created_minutes_ago": 5},
    )
    plan = decide_once(cluster(zones.nodes(), zones.pods()), plugin())
    assert evicted(plan) == ["default/p0-0"]


def test_terminating_pods_are_not_counted() -> None:
    zones = Zones([3, 1], pod_extra=lambda z, r: {"deleting": z == 0 and r == 0})
    assert evicted(decide_once(cluster(zones.nodes(), zones.pods()), plugin())) == []


def test_match_label_keys_balance_each_revision_on_its_own() -> None:
    """Revision v1 is [3,0] and v2 [0,3]: balanced together, but matchLabelKeys counts each
    revision on its own, so one pod of each moves."""
    written = spread(ZONE, matchLabelKeys=["pod-template-hash"])
    pods = [
        pod(f"{rev}-{r}", node_name, {**WEB, "pod-template-hash": rev}, topology_spread=[written])
        for rev, node_name in (("v1", "n0"), ("v2", "n1"))
        for r in range(3)
    ]
    nodes = [node(f"n{i}", {ZONE: f"z{i}"}) for i in range(2)]
    plan = decide_once(cluster(nodes, pods), plugin())
    assert sorted(a.pod.split("-")[0] for a in plan.actions) == ["default/v1", "default/v2"]


# -- the ESXi host -----------------------------------------------------------------------------


def _host_cluster(placements: dict[str, str], annotations: dict[str, str], key: str) -> Any:
    """Six replicas, one node each but two on n2; nodes n1..n6, hosts from the placements."""
    written = spread(key)
    on = {"n1": 1, "n2": 2, "n3": 1, "n4": 1, "n5": 0, "n6": 1}
    pods = [
        pod(f"web-{n}-{r}", n, WEB, topology_spread=[written], annotations=annotations)
        for n, count in on.items()
        for r in range(count)
    ]
    nodes = [node(n, {ESXI: host}) for n, host in placements.items()]
    return cluster(nodes, pods, placements=placements)


BALANCED = {
    "n1": "esx-a",
    "n4": "esx-a",
    "n2": "esx-b",
    "n5": "esx-b",
    "n3": "esx-c",
    "n6": "esx-c",
}
AFTER_VMOTION = {**BALANCED, "n2": "esx-a"}  # n2's VM (two replicas) moved onto esx-a


def test_host_spread_after_a_vmotion_evicts_the_excess_towards_the_empty_host() -> None:
    plan = decide_once(_host_cluster(AFTER_VMOTION, {}, ESXI), plugin())
    assert len(plan.actions) == 2  # [4,0,2] -> [2,2,2]
    assert {a.target for a in plan.actions} == {"n5"}
    assert all(a.node in ("n1", "n2", "n4") for a in plan.actions)
    assert "hostaffinity.io/esxi-host=esx-a has 4 matching pods" in plan.actions[0].rule


def test_hostname_spread_of_an_opted_in_pod_is_read_on_the_host() -> None:
    """Per node the spread is [1,1,2,0,1,1] either way; per host it is balanced before the move
    and [4,0,2] after: only the host reading is what the opted-in pods asked for."""
    assert evicted(decide_once(_host_cluster(BALANCED, PHYSICAL, HOSTNAME), plugin())) == []
    plan = decide_once(_host_cluster(AFTER_VMOTION, PHYSICAL, HOSTNAME), plugin())
    assert len(plan.actions) == 2
    assert "physical reading of kubernetes.io/hostname" in plan.actions[0].rule
    # Without the opt-in the same pods are spread per node: one moves, to the empty node.
    per_node = decide_once(_host_cluster(AFTER_VMOTION, {}, HOSTNAME), plugin())
    assert [a.target for a in per_node.actions] == ["n5"]


def test_no_host_can_take_them_evicts_nothing_and_says_why() -> None:
    placements = {**AFTER_VMOTION}
    state = _host_cluster(placements, {}, ESXI)
    state.upsert_node(node("n5", {ESXI: "esx-b"}, unschedulable=True))
    plan = decide_once(state, plugin())
    assert plan.actions == []
    assert len(plan.skipped) == 2
    for skip in plan.skipped:
        assert skip.strategy == TopologySpread.name
        ((_, why),) = skip.reasons
        assert why.startswith("no other node")


def test_topology_balance_node_fit_off_still_needs_another_domain_and_node_fit() -> None:
    state = _host_cluster(AFTER_VMOTION, {}, ESXI)
    plan = decide_once(state, plugin(topologyBalanceNodeFit=False))
    assert len(plan.actions) == 2
    assert all(a.target != a.node for a in plan.actions)


# -- args and policy -----------------------------------------------------------------------


def test_args_defaults_are_upstreams() -> None:
    args = TopologySpreadArgs()
    assert args.constraints == ["DoNotSchedule"]
    assert args.topology_balance_node_fit is True
    assert args.actions() == frozenset({"DoNotSchedule"})


def test_bad_args_report_every_problem_at_once() -> None:
    with pytest.raises(StrategyArgsError) as raised:
        plugin(
            constraints=["DoNotSchedule", "Sometimes"],
            namespaces={"include": ["a"], "exclude": ["b"]},
        )
    message = str(raised.value)
    assert "'Sometimes' is not one of DoNotSchedule, ScheduleAnyway" in message
    assert "only one of namespaces.include and namespaces.exclude" in message
    with pytest.raises(StrategyArgsError, match="topologyBalanceNodFit"):
        plugin(topologyBalanceNodFit=True)


POLICY = "policy-topology-spread-v1alpha2.yaml"


def test_upstream_policy_naming_the_plugin_loads() -> None:
    policy = load_policy(fixture_dir("descheduler") / POLICY)
    (profile,) = policy.profiles
    (strategy,) = profile.strategies
    assert isinstance(strategy, TopologySpread)
    assert strategy.args.actions() == frozenset({"DoNotSchedule"})
    assert strategy.args.topology_balance_node_fit is True


def test_policy_with_a_bad_constraint_is_refused(tmp_path: Path) -> None:
    text = (fixture_dir("descheduler") / POLICY).read_text(encoding="utf-8")
    bad = tmp_path / "policy.yaml"
    bad.write_text(text.replace("- DoNotSchedule", "- Always"), encoding="utf-8")
    with pytest.raises(PolicyError, match="'Always' is not one of"):
        load_policy(bad)


def test_a_plugin_kept_between_cycles_decides_as_a_fresh_one() -> None:
    """Its bookkeeping (compiled pods, groups with nothing to move) follows every change: a
    vMotion, a pod relabelled out of the spread and back, a pod gone, a node cordoned."""
    kept = plugin()
    state = _host_cluster(BALANCED, {}, ESXI)

    def same_as_fresh() -> list[str]:
        ours = evicted(decide_once(state, kept))
        assert ours == evicted(decide_once(state, plugin()))
        return ours

    assert same_as_fresh() == []
    state.set_placement("n2", "esx-a")  # the vMotion: [4,0,2]
    assert len(same_as_fresh()) == 2
    web_1 = state.pods["default/web-n1-0"]
    state.upsert_pod(pod("web-n1-0", "n1", {"app": "other"}, topology_spread=[spread(ESXI)]))
    assert len(same_as_fresh()) == 1  # [3,0,2]
    state.upsert_pod(web_1)
    state.remove_pod("default/web-n4-0")
    assert len(same_as_fresh()) == 1  # [3,0,2] again
    state.upsert_node(node("n5", {ESXI: "esx-b"}, unschedulable=True))
    assert same_as_fresh() == []  # nowhere to go
    state.upsert_node(node("n5", {ESXI: "esx-b"}))
    assert len(same_as_fresh()) == 1


# -- KubeVirt VM replicas -------------------------------------------------------------------------


def _vm_replica(name: str, node_name: str, *, migrated: bool = False) -> DeschedulerPod:
    """A VMIRS replica's virt-launcher pod with a host spread; `migrated`: it was a live
    migration's target, whose stored spread leaves its own VM out (the admission webhook's)."""
    uid = f"uid-vmi-{name}"
    labels = {"app": "db", "kubevirt.io/created-by": uid}
    written = spread(ESXI, selector={"app": "db"})
    if migrated:
        labels["kubevirt.io/migrationJobUID"] = f"uid-migration-{name}"
        own = {"key": "kubevirt.io/created-by", "operator": "NotIn", "values": [uid]}
        written["labelSelector"]["matchExpressions"] = [own]
    return launcher(name, node_name, labels, topology_spread=[written])


def _vm_cluster(on: dict[str, str], migrated: str | None) -> ClusterState:
    """VMIRS `db`'s replicas on nodes n1..n4 (hosts esx-a, esx-b, esx-c, esx-a)."""
    placements = {"n1": "esx-a", "n2": "esx-b", "n3": "esx-c", "n4": "esx-a"}
    pods = [_vm_replica(name, n, migrated=name == migrated) for name, n in on.items()]
    owner = ("VirtualMachineInstanceReplicaSet", "db")
    vmis = [vmi(name, n, owner=owner) for name, n in on.items()]
    nodes = [node(n, {ESXI: host}) for n, host in placements.items()]
    return cluster(nodes, pods, placements=placements, vmis=vmis)


def _vm_plan(on: dict[str, str], migrated: str | None) -> list[tuple[str, str | None]]:
    plan = decide_once(_vm_cluster(on, migrated), plugin())
    assert all("NotIn" not in action.rule for action in plan.actions)
    return [(action.pod, action.target) for action in plan.actions]


def test_vm_replicas_declare_one_spread_migrated_or_not() -> None:
    """Hosts [1, 2, 1] are balanced for maxSkew 1. The migrated replica's own spread leaves it
    out ([0, 2, 1] would be a skew of 2), but it is read as its siblings': nothing moves. Piled
    on one host, the replicas are balanced as one spread, as if none had migrated."""
    balanced = {"db-0": "n1", "db-1": "n2", "db-2": "n2", "db-3": "n3"}
    assert _vm_plan(balanced, migrated="db-0") == []
    piled = {"db-0": "n1", "db-1": "n1", "db-2": "n4", "db-3": "n4"}
    moves = _vm_plan(piled, migrated="db-0")
    assert len(moves) == 3
    assert moves == _vm_plan(piled, migrated=None)


def test_vm_replicas_moved_for_a_spread_cool_down_as_one_workload() -> None:
    """The cooldown after one replica of the VMIRS moved holds every replica of it."""
    piled = {"db-0": "n1", "db-1": "n1", "db-2": "n4", "db-3": "n4"}
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    planner.record_evicted("default/VirtualMachineInstanceReplicaSet/db")
    plan = decide_once(_vm_cluster(piled, migrated="db-0"), plugin(), planner=planner)
    assert plan.actions == []
    assert plan.skipped
    assert all("cooling down" in why for skip in plan.skipped for _, why in skip.reasons)
