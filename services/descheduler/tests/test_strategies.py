"""Each strategy's decisions, table-driven, through one planner cycle.

Where upstream covers the case, the test names the upstream test it mirrors (kubernetes-sigs/
descheduler v0.36, pkg/framework/plugins/<plugin>/*_test.go) and expects the same count;
the differences are ours on purpose (node fit is always on, both pods of a pair never go).
"""

from __future__ import annotations

import pytest

from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    Outcome,
    PlannerSettings,
)
from hostaffinity.descheduler.core.strategies.duplicates import Duplicates, DuplicatesArgs
from hostaffinity.descheduler.core.strategies.interpod_affinity import (
    InterPodAffinity,
    InterPodAffinityArgs,
)
from hostaffinity.descheduler.core.strategies.interpod_anti_affinity import (
    InterPodAntiAffinity,
    InterPodAntiAffinityArgs,
)
from hostaffinity.descheduler.core.strategies.node_affinity import (
    PREFERRED,
    REQUIRED,
    NodeAffinity,
    NodeAffinityArgs,
)
from hostaffinity.descheduler.core.strategies.node_taints import NodeTaints, NodeTaintsArgs
from hostaffinity.schema import LABEL_ZONE
from tests.platform.builders.descheduler import (
    ESXI,
    HOSTNAME,
    anti_affinity,
    cluster,
    decide_once,
    evicted,
    launcher,
    node,
    pod,
    vm,
    vmi,
)

WEB = {"app": "web"}
ANTI = anti_affinity(WEB)
NOSCHED = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def anti(**kwargs: object) -> InterPodAntiAffinity:
    return InterPodAntiAffinity(InterPodAntiAffinityArgs(**kwargs))  # type: ignore[arg-type]


# -- inter-pod anti-affinity -----------------------------------------------------------------


def test_one_of_a_violating_pair_is_evicted_never_both() -> None:
    state = cluster(
        [node("n1"), node("n2"), node("n3")],
        [
            pod("a", "n1", WEB, affinity=ANTI, created_minutes_ago=60),
            pod("b", "n1", WEB, affinity=ANTI, created_minutes_ago=5),
        ],
    )
    plan = decide_once(state, anti())
    assert evicted(plan) == ["default/b"]  # the newer pod goes
    assert "newest" in plan.actions[0].why
    assert "required pod anti-affinity" in plan.actions[0].rule


def test_evict_only_one_pod_after_sorting_by_priority() -> None:
    """Upstream "Evict only 1 pod after sorting": the lower-priority pod goes."""
    state = cluster(
        [node("n1"), node("n2")],
        [
            pod("p5", "n1", WEB, affinity=ANTI, priority=100, created_minutes_ago=1),
            pod("p6", "n1", WEB, affinity=ANTI, priority=50, created_minutes_ago=90),
        ],
    )
    assert evicted(decide_once(state, anti())) == ["default/p6"]


def test_pod_conflicting_with_a_critical_pod_is_evicted_not_the_critical_one() -> None:
    """Upstream "Evicts pod that conflicts with critical pod (but does not evict critical pod)"."""
    state = cluster(
        [node("n1"), node("n2")],
        [
            pod(
                "critical", "n1", WEB, affinity=ANTI, priority=2_000_000_000, created_minutes_ago=1
            ),
            pod("p1", "n1", WEB, affinity=ANTI, created_minutes_ago=90),
        ],
    )
    assert evicted(decide_once(state, anti())) == ["default/p1"]


@pytest.mark.parametrize(
    "other",
    [
        node("n2", unschedulable=True),
        node("n2", {"datacenter": "east"}, taints=[NOSCHED]),
        node("n2", cpu="100m"),
        node("n2", ready=False),
    ],
    ids=[
        # Upstream "Won't evict pods because only other node is not schedulable".
        "only-other-node-cordoned",
        "only-other-node-tainted",
        # Upstream "Won't evict pods because only other node doesn't have enough resources".
        "only-other-node-too-small",
        "only-other-node-not-ready",
    ],
)
def test_nothing_evicted_when_no_other_node_fits(other: object) -> None:
    state = cluster(
        [node("n1"), other],  # type: ignore[list-item]
        [
            pod("a", "n1", WEB, affinity=ANTI, cpu="500m"),
            pod("b", "n1", WEB, affinity=ANTI, cpu="500m"),
        ],
    )
    plan = decide_once(state, anti())
    assert evicted(plan) == []
    assert plan.skipped
    assert all("node" in why for _, why in plan.skipped[0].reasons)


def test_terminating_pods_are_never_evicted() -> None:
    """Upstream "No pod to evicted since all pod terminating"."""
    state = cluster(
        [node("n1"), node("n2")],
        [
            pod("a", "n1", WEB, affinity=ANTI, deleting=True),
            pod("b", "n1", WEB, affinity=ANTI, deleting=True),
        ],
    )
    assert evicted(decide_once(state, anti())) == []


def test_piled_replicas_are_spread_only_as_far_as_free_nodes_go() -> None:
    pods = [pod(f"r{i}", "n1", WEB, affinity=ANTI, created_minutes_ago=10 * i) for i in range(5)]
    state = cluster([node("n1"), node("n2"), node("n3")], pods)
    plan = decide_once(state, anti())
    # Two other nodes, each can hold one replica: two go, three stay (one of them stays on n1
    # legitimately; two have nowhere to go and are not evicted).
    assert len(plan.actions) == 2
    assert sorted(a.target for a in plan.actions) == ["n2", "n3"]


def test_esxi_host_domain_uses_the_placement_before_the_label() -> None:
    """Seed 004: n2's VM moved onto esx-a; its label still says esx-b."""
    term = anti_affinity(WEB, ESXI)
    state = cluster(
        [node("n1", {ESXI: "esx-a"}), node("n2", {ESXI: "esx-b"}), node("n3", {ESXI: "esx-c"})],
        [
            pod("a", "n1", WEB, affinity=term, created_minutes_ago=60),
            pod("b", "n2", WEB, affinity=term, created_minutes_ago=30),
        ],
        placements={"n1": "esx-a", "n2": "esx-a", "n3": "esx-c"},
    )
    plan = decide_once(state, anti())
    assert evicted(plan) == ["default/b"]
    assert plan.actions[0].target == "n3"
    assert "hostaffinity.io/esxi-host=esx-a" in plan.actions[0].rule


def test_esxi_host_violation_with_no_other_host_evicts_nothing() -> None:
    term = anti_affinity(WEB, ESXI)
    state = cluster(
        [node("n1", {ESXI: "esx-a"}), node("n2", {ESXI: "esx-a"})],
        [pod("a", "n1", WEB, affinity=term), pod("b", "n2", WEB, affinity=term)],
        placements={"n1": "esx-a", "n2": "esx-a"},
    )
    assert evicted(decide_once(state, anti())) == []


def test_hostname_term_read_physically_with_the_opt_in() -> None:
    annotations = {"hostaffinity.io/physical-anti-affinity": "true"}
    state = cluster(
        [node("n1"), node("n2"), node("n3")],
        [
            pod("a", "n1", WEB, affinity=ANTI, annotations=annotations),
            pod("b", "n2", WEB, affinity=ANTI, annotations=annotations, created_minutes_ago=1),
        ],
        placements={"n1": "esx-a", "n2": "esx-a", "n3": "esx-b"},
    )
    plan = decide_once(state, anti())
    assert evicted(plan) == ["default/b"]
    assert plan.actions[0].target == "n3"


def test_namespace_selector_decides_which_pods_count() -> None:
    term = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": WEB},
                    "namespaceSelector": {"matchLabels": {"team": "shop"}},
                    "topologyKey": HOSTNAME,
                }
            ]
        }
    }
    namespaces = {"default": {"team": "shop"}, "other": {"team": "ops"}, "third": {"team": "shop"}}
    nodes = [node("n1"), node("n2")]
    outside = cluster(
        nodes,
        [pod("a", "n1", WEB, affinity=term), pod("b", "n1", WEB, namespace="other")],
        namespaces=namespaces,
    )
    assert evicted(decide_once(outside, anti())) == []
    inside = cluster(
        [node("n1"), node("n2")],
        [
            pod("a", "n1", WEB, affinity=term, created_minutes_ago=90),
            pod("b", "n1", WEB, namespace="third"),
        ],
        namespaces=namespaces,
    )
    assert evicted(decide_once(inside, anti())) == ["third/b"]


def test_match_label_keys_narrow_the_term_to_the_same_revision() -> None:
    """The API server merges matchLabelKeys into the selector; pods read back carry both."""

    def term(rev: str) -> dict[str, object]:
        return {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchLabels": WEB,
                            "matchExpressions": [
                                {"key": "pod-template-hash", "operator": "In", "values": [rev]}
                            ],
                        },
                        "matchLabelKeys": ["pod-template-hash"],
                        "topologyKey": HOSTNAME,
                    }
                ]
            }
        }

    state = cluster(
        [node("n1"), node("n2")],
        [
            pod("old", "n1", {**WEB, "pod-template-hash": "v1"}, affinity=term("v1")),
            pod("new", "n1", {**WEB, "pod-template-hash": "v2"}, affinity=term("v2")),
        ],
    )
    assert evicted(decide_once(state, anti())) == []


def test_preferred_terms_only_by_setting_and_only_towards_a_free_domain() -> None:
    soft = anti_affinity(WEB, preferred=True)
    pods = [
        pod("a", "n1", WEB, affinity=soft, created_minutes_ago=90),
        pod("b", "n1", WEB, affinity=soft, created_minutes_ago=5),
        pod("c", "n2", WEB, affinity=soft, created_minutes_ago=50),
    ]
    assert evicted(decide_once(cluster([node("n1"), node("n2")], pods), anti())) == []
    # n2 already holds a replica: moving b there helps nothing.
    both = cluster([node("n1"), node("n2")], pods)
    assert evicted(decide_once(both, anti(include_preferred=True))) == []
    three = cluster([node("n1"), node("n2"), node("n3")], pods)
    plan = decide_once(three, anti(include_preferred=True))
    assert [(a.pod, a.target) for a in plan.actions] == [("default/b", "n3")]


def test_max_pods_total_limit() -> None:
    """Upstream "Maximum pods to evict (maxNoOfPodsToEvictTotal)": total 1 -> 1 evicted."""
    from hostaffinity.descheduler.core.eviction_planner import EvictionLimits

    pods = [pod(f"p{i}", "n1", WEB, affinity=ANTI, created_minutes_ago=i) for i in range(4)]
    state = cluster([node(f"n{i}") for i in range(1, 6)], pods)
    assert len(decide_once(state, anti(), limits=EvictionLimits(total=1)).actions) == 1
    per_ns = decide_once(state, anti(), limits=EvictionLimits(per_namespace=3))
    assert len(per_ns.actions) == 3


# -- inter-pod affinity -----------------------------------------------------------------------


def test_required_pod_affinity_no_longer_satisfied() -> None:
    together = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}
            ]
        }
    }
    nodes = [node("n1"), node("n2")]
    strategy = InterPodAffinity(InterPodAffinityArgs())
    held = cluster(
        nodes,
        [
            pod("web", "n1", WEB, affinity=together),
            pod("db", "n1", {"app": "db"}, owner=("StatefulSet", "db")),
        ],
    )
    assert evicted(decide_once(held, strategy)) == []
    lost = cluster(
        nodes,
        [
            pod("web", "n1", WEB, affinity=together),
            pod("db", "n2", {"app": "db"}, owner=("StatefulSet", "db")),
        ],
    )
    plan = decide_once(lost, strategy)
    assert [(a.pod, a.target) for a in plan.actions] == [("default/web", "n2")]


# -- node affinity ----------------------------------------------------------------------------


def _required(key: str, value: str) -> dict[str, object]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
                ]
            }
        }
    }


def _preferred(key: str, value: str, weight: int = 10) -> dict[str, object]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "preference": {
                        "matchExpressions": [{"key": key, "operator": "In", "values": [value]}]
                    },
                }
            ]
        }
    }


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        # Upstream "Pod is scheduled on node without matching labels, another schedulable node
        # available, should be evicted".
        ([node("n1"), node("n2", {"disk": "ssd"})], ["default/p"]),
        # Upstream "Pod is scheduled on node without matching labels, but no node where pod fits
        # is available, should not evict [required affinity]".
        ([node("n1"), node("n2", {"disk": "ssd"}, unschedulable=True)], []),
        # Ours: the only matching node has no room for the pod's requests.
        ([node("n1"), node("n2", {"disk": "ssd"}, cpu="50m")], []),
    ],
    ids=["other-node-fits", "other-node-cordoned", "other-node-too-small"],
)
def test_required_node_affinity(nodes: list[object], expected: list[str]) -> None:
    state = cluster(nodes, [pod("p", "n1", affinity=_required("disk", "ssd"))])  # type: ignore[arg-type]
    assert evicted(decide_once(state, NodeAffinity(NodeAffinityArgs()))) == expected


def test_node_selector_counts_as_required_node_affinity() -> None:
    state = cluster(
        [node("n1"), node("n2", {"disk": "ssd"})], [pod("p", "n1", node_selector={"disk": "ssd"})]
    )
    assert evicted(decide_once(state, NodeAffinity(NodeAffinityArgs()))) == ["default/p"]


def test_preferred_node_affinity_moves_only_to_a_clearly_better_node() -> None:
    """Upstream "Pod is scheduled on node without matching labels, another schedulable node
    available with better fit, should be evicted"; plus our minimum gain."""
    args = NodeAffinityArgs(node_affinity_type=[PREFERRED], min_preferred_gain=5)
    better = cluster(
        [node("n1"), node("n2", {"zone": "a"})],
        [pod("p", "n1", affinity=_preferred("zone", "a", 10))],
    )
    assert evicted(decide_once(better, NodeAffinity(args))) == ["default/p"]
    marginal = cluster(
        [node("n1"), node("n2", {"zone": "a"})],
        [pod("p", "n1", affinity=_preferred("zone", "a", 3))],
    )
    assert evicted(decide_once(marginal, NodeAffinity(args))) == []
    there = cluster(
        [node("n1", {"zone": "a"}), node("n2", {"zone": "a"})],
        [pod("p", "n1", affinity=_preferred("zone", "a", 10))],
    )
    assert evicted(decide_once(there, NodeAffinity(args))) == []
    only_required = NodeAffinity(NodeAffinityArgs(node_affinity_type=[REQUIRED]))
    assert evicted(decide_once(better, only_required)) == []


# -- taints -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "taint", "tolerations", "expected"),
    [
        # Upstream "Pods not tolerating node taint should be evicted".
        (NodeTaintsArgs(), NOSCHED, [], ["default/p"]),
        # Upstream "Pods tolerating includedTaint should not get evicted. Pods not tolerating
        # includedTaints should get evicted" (the tolerating half).
        (NodeTaintsArgs(), NOSCHED, [{"key": "dedicated", "operator": "Exists"}], []),
        # Upstream "Pods not tolerating excluded node taints (by key) should not be evicted".
        (NodeTaintsArgs(excluded_taints=["dedicated"]), NOSCHED, [], []),
        # Upstream "The excluded taint matches the key of node1's taint, but does not match the
        # value".
        (NodeTaintsArgs(excluded_taints=["dedicated=other"]), NOSCHED, [], ["default/p"]),
        (NodeTaintsArgs(included_taints=["dedicated=infra"]), NOSCHED, [], ["default/p"]),
        # Upstream "Pods not tolerating PreferNoSchedule node taint should not be evicted when
        # not enabled".
        (NodeTaintsArgs(), {"key": "soft", "effect": "PreferNoSchedule"}, [], []),
        # Upstream "Pods not tolerating PreferNoSchedule node taint should be evicted when
        # enabled".
        (
            NodeTaintsArgs(include_prefer_no_schedule=True),
            {"key": "soft", "effect": "PreferNoSchedule"},
            [],
            ["default/p"],
        ),
    ],
    ids=[
        "untolerated",
        "tolerated",
        "excluded-key",
        "excluded-other-value",
        "included",
        "prefer-ignored",
        "prefer-included",
    ],
)
def test_node_taints(
    args: NodeTaintsArgs,
    taint: dict[str, str],
    tolerations: list[dict[str, str]],
    expected: list[str],
) -> None:
    state = cluster(
        [node("n1", taints=[taint]), node("n2")], [pod("p", "n1", tolerations=tolerations)]
    )
    assert evicted(decide_once(state, NodeTaints(args))) == expected


def test_prefer_no_schedule_pod_is_not_moved_to_another_soft_tainted_node() -> None:
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    state = cluster([node("n1", taints=[soft]), node("n2", taints=[soft])], [pod("p", "n1")])
    args = NodeTaintsArgs(include_prefer_no_schedule=True)
    assert evicted(decide_once(state, NodeTaints(args))) == []


# -- duplicates -------------------------------------------------------------------------------


def test_duplicates_spread_piled_replicas_when_other_nodes_fit() -> None:
    """Seed 001: five replicas on one node, three nodes: down to ceil(5/3) = 2 per node, as
    upstream's RemoveDuplicates balances to the average over the nodes the pods fit."""
    pods = [pod(f"r{i}", "n1", WEB, created_minutes_ago=i) for i in range(5)]
    state = cluster([node("n1"), node("n2"), node("n3")], pods)
    plan = decide_once(state, Duplicates(DuplicatesArgs()))
    assert len(plan.actions) == 3
    targets = sorted(a.target for a in plan.actions)
    assert targets.count("n2") <= 2
    assert targets.count("n3") <= 2


def test_duplicates_average_over_the_nodes_the_pods_fit_only() -> None:
    """Four replicas on n1; n3 and n4 are tainted, so the pods fit n1 and n2 only: the average
    is ceil(4/2) = 2 (counting every node, it would be 1, and one pod would move, not two)."""
    pods = [pod(f"r{i}", "n1", WEB, created_minutes_ago=i) for i in range(4)]
    nodes = [node("n1"), node("n2"), node("n3", taints=[NOSCHED]), node("n4", taints=[NOSCHED])]
    plan = decide_once(cluster(nodes, pods), Duplicates(DuplicatesArgs()))
    assert [(a.pod, a.target) for a in plan.actions] == [("default/r0", "n2"), ("default/r1", "n2")]
    assert plan.actions[0].rule.endswith("at most 2 each over 2 feasible")


def test_duplicates_count_feasible_nodes_only_until_the_average_is_one() -> None:
    """Two replicas on n1 and five nodes that fit: once two nodes are found the average is 1,
    whatever the others, so the rule says what was counted."""
    pods = [pod(f"r{i}", "n1", WEB, created_minutes_ago=i) for i in range(2)]
    plan = decide_once(cluster([node(f"n{i}") for i in range(1, 6)], pods),
                       Duplicates(DuplicatesArgs()))  # fmt: skip
    [action] = plan.actions
    assert action.pod == "default/r0"
    assert action.rule.endswith("at most 1 each over at least 2 feasible")


def test_duplicates_leave_owner_kinds_that_are_excluded() -> None:
    pods = [pod(f"r{i}", "n1", WEB) for i in range(3)]
    state = cluster([node("n1"), node("n2")], pods)
    args = DuplicatesArgs(exclude_owner_kinds=["ReplicaSet"])
    assert evicted(decide_once(state, Duplicates(args))) == []


@pytest.mark.parametrize("owner", ["VirtualMachineInstanceReplicaSet", "VirtualMachinePool"])
def test_vm_replicas_of_a_vmirs_or_a_pool_are_one_workload(owner: str) -> None:
    """VMI -> VMIRS, or VMI -> VirtualMachine -> VirtualMachinePool: two replicas piled on one
    node are duplicates; one moves (live), and the cooldown then holds the whole set."""
    names = ("db-a", "db-b")
    if owner == "VirtualMachinePool":
        vmis = [vmi(n, "n1", owner=("VirtualMachine", n)) for n in names]
        vms = [vm(n, pool="db") for n in names]
    else:
        vmis = [vmi(n, "n1", owner=(owner, "db")) for n in names]
        vms = []
    state = cluster([node("n1"), node("n2")], [launcher(n, "n1") for n in names], vmis=vmis,
                    vms=vms)  # fmt: skip
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    plan = decide_once(state, Duplicates(DuplicatesArgs()), planner=planner)
    [action] = plan.actions
    assert (action.outcome, action.target) == (Outcome.MIGRATE, "n2")
    assert action.workload == f"default/{owner}/db"
    planner.record_evicted(action.workload)
    replicas = [state.pods[key] for key in state.workloads[action.workload]]
    assert len(replicas) == 2
    assert all(planner.cooling(state.workload_of(replica)) for replica in replicas)


def test_vms_of_their_own_are_not_duplicates() -> None:
    names = ("db-a", "db-b")
    vmis = [vmi(n, "n1", owner=("VirtualMachine", n)) for n in names]
    state = cluster([node("n1"), node("n2")], [launcher(n, "n1") for n in names], vmis=vmis,
                    vms=[vm(n) for n in names])  # fmt: skip
    assert decide_once(state, Duplicates(DuplicatesArgs())).actions == []


def test_duplicates_on_one_esxi_host() -> None:
    pods = [pod("r0", "n1", WEB), pod("r1", "n2", WEB, created_minutes_ago=1)]
    placements = {"n1": "esx-a", "n2": "esx-a", "n3": "esx-b"}
    nodes = [node("n1"), node("n2"), node("n3")]
    by_node = cluster(nodes, pods, placements=placements)
    assert evicted(decide_once(by_node, Duplicates(DuplicatesArgs()))) == []
    by_host = cluster(nodes, pods, placements=placements)
    plan = decide_once(by_host, Duplicates(DuplicatesArgs(domain="esxi-host")))
    assert [(a.pod, a.target) for a in plan.actions] == [("default/r1", "n3")]


def test_duplicates_in_one_zone() -> None:
    """A zone is a domain like the host: read from the node label the node-labeller keeps true."""
    zones = {"n1": "zone-a", "n2": "zone-a", "n3": "zone-b"}
    nodes = [node(name, {LABEL_ZONE: zone}) for name, zone in zones.items()]
    pods = [pod("r0", "n1", WEB), pod("r1", "n2", WEB, created_minutes_ago=1)]
    by_host = cluster(nodes, pods, placements={"n1": "esx-a", "n2": "esx-b", "n3": "esx-c"})
    assert evicted(decide_once(by_host, Duplicates(DuplicatesArgs(domain="esxi-host")))) == []
    plan = decide_once(cluster(nodes, pods), Duplicates(DuplicatesArgs(domain="zone")))
    assert [(a.pod, a.target) for a in plan.actions] == [("default/r1", "n3")]
