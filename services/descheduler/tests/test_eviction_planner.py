"""The eviction planner: protections, limits, cooldown, node fit and KubeVirt, one rule per test."""

from __future__ import annotations

import json

import pytest

from hostaffinity.affinity.model import LabelSelector
from hostaffinity.descheduler.config import MigrationLimits
from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    Outcome,
    PlannerSettings,
)
from hostaffinity.descheduler.core.kubevirt import (
    decode_kubevirt,
    placement_awaiting_restart,
)
from hostaffinity.descheduler.core.protections import (
    DefaultEvictorArgs,
    PriorityThreshold,
    parse_duration,
)
from hostaffinity.descheduler.core.strategies.interpod_anti_affinity import (
    InterPodAntiAffinity,
    InterPodAntiAffinityArgs,
)
from hostaffinity.descheduler.core.strategies.node_taints import NodeTaints, NodeTaintsArgs
from tests.platform.builders.descheduler import (
    ESXI,
    anti_affinity,
    cluster,
    decide_once,
    evicted,
    kubevirt_json,
    launcher,
    node,
    pod,
    vm,
    vmi,
    vmi_json,
)

NOSCHED = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
TAINTS = NodeTaints(NodeTaintsArgs())


def tainted_cluster(*pods: object) -> object:
    return cluster([node("n1", taints=[NOSCHED]), node("n2")], pods)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "args", "expected_reason"),
    [
        ({"owner": ("DaemonSet", "agent")}, DefaultEvictorArgs(), "DaemonSet"),
        ({"annotations": {"kubernetes.io/config.mirror": "x"}}, DefaultEvictorArgs(), "mirror"),
        ({"annotations": {"kubernetes.io/config.source": "file"}}, DefaultEvictorArgs(), "static"),
        ({"priority": 2_000_000_000}, DefaultEvictorArgs(), "system-critical"),
        ({"deleting": True}, DefaultEvictorArgs(), "terminating"),
        ({"owner": None}, DefaultEvictorArgs(), "no owner"),
        ({"volumes": [{"name": "scratch", "emptyDir": {}}]}, DefaultEvictorArgs(), "local storage"),
        (
            {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]},
            DefaultEvictorArgs(ignore_pvc_pods=True),
            "PersistentVolumeClaim",
        ),
        (
            {"labels": {"tier": "db"}},
            DefaultEvictorArgs(label_selector=LabelSelector(match_labels={"tier": "web"})),
            "labelSelector",
        ),
        (
            {"priority": 500},
            DefaultEvictorArgs(priority_threshold=PriorityThreshold(value=100)),
            "threshold",
        ),
        ({"created_minutes_ago": 2}, DefaultEvictorArgs(min_pod_age="5m"), "minPodAge"),
        (
            {"annotations": {"descheduler.alpha.kubernetes.io/prefer-no-eviction": ""}},
            DefaultEvictorArgs(no_eviction_policy="Mandatory"),
            "prefer-no-eviction",
        ),
        ({}, DefaultEvictorArgs(ignore_pods_without_pdb=True), "PodDisruptionBudget"),
        ({}, DefaultEvictorArgs(min_replicas=2), "minReplicas"),
    ],
    ids=[
        "daemonset",
        "mirror",
        "static",
        "system-critical",
        "terminating",
        "bare",
        "emptydir",
        "pvc-when-asked",
        "label-selector",
        "priority-threshold",
        "min-pod-age",
        "no-eviction-mandatory",
        "without-pdb-when-asked",
        "min-replicas",
    ],
)
def test_protected_pods_are_not_evicted(
    kwargs: dict[str, object], args: DefaultEvictorArgs, expected_reason: str
) -> None:
    state = tainted_cluster(pod("p", "n1", **kwargs))  # type: ignore[arg-type]
    plan = decide_once(state, TAINTS, evictor_args=args)  # type: ignore[arg-type]
    assert evicted(plan) == []
    [(_, reason)] = plan.skipped[0].reasons
    assert expected_reason in reason


@pytest.mark.parametrize(
    ("kwargs", "args"),
    [
        (
            {
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "annotations": {"descheduler.alpha.kubernetes.io/evict": "true"},
            },
            DefaultEvictorArgs(),
        ),
        (
            {"volumes": [{"name": "scratch", "emptyDir": {}}]},
            DefaultEvictorArgs(evict_local_storage_pods=True),
        ),
        ({"owner": ("DaemonSet", "agent")}, DefaultEvictorArgs(evict_daemon_set_pods=True)),
        (
            {"annotations": {"descheduler.alpha.kubernetes.io/prefer-no-eviction": ""}},
            DefaultEvictorArgs(),
        ),
        ({"priority": 50}, DefaultEvictorArgs(priority_threshold=PriorityThreshold(value=100))),
    ],
    ids=[
        "evict-annotation",
        "local-storage-allowed",
        "daemonset-allowed",
        "prefer-no-eviction-is-a-preference",
        "below-threshold",
    ],
)
def test_allowed_pods_are_evicted(kwargs: dict[str, object], args: DefaultEvictorArgs) -> None:
    state = tainted_cluster(pod("p", "n1", **kwargs))  # type: ignore[arg-type]
    assert evicted(decide_once(state, TAINTS, evictor_args=args)) == ["default/p"]  # type: ignore[arg-type]


def test_per_node_limit() -> None:
    pods = [pod(f"p{i}", "n1", owner=("ReplicaSet", f"rs{i}")) for i in range(4)]
    state = tainted_cluster(*pods)
    plan = decide_once(state, TAINTS, limits=EvictionLimits(per_node=2))  # type: ignore[arg-type]
    assert len(plan.actions) == 2
    assert sum("per node" in why for s in plan.skipped for _, why in s.reasons) == 2


def test_a_pod_whose_only_feasible_node_is_its_own_is_never_evicted() -> None:
    state = cluster([node("n1", taints=[NOSCHED]), node("n2", cpu="10m")], [pod("p", "n1")])
    plan = decide_once(state, TAINTS)
    assert evicted(plan) == []
    assert "insufficient cpu" in plan.skipped[0].reasons[0][1]


def test_pods_never_count_on_the_same_free_slot() -> None:
    # n2 has room for one 600m pod; two pods must leave n1.
    pods = [pod(f"p{i}", "n1", cpu="600m", owner=("ReplicaSet", f"rs{i}")) for i in range(2)]
    state = cluster([node("n1", taints=[NOSCHED]), node("n2", cpu="1")], pods)
    plan = decide_once(state, TAINTS)
    assert len(plan.actions) == 1
    assert state.pods["default/p0"].spec.node_name == "n1"  # planned moves were undone


def test_cooldown_stops_a_second_eviction_of_the_same_workload() -> None:
    clock = [1000.0]
    planner = EvictionPlanner(
        PlannerSettings(cooldown_seconds=60), EvictionLimits(), lambda: clock[0]
    )
    state = tainted_cluster(pod("p1", "n1"), pod("p2", "n1"))
    first = decide_once(state, TAINTS, planner=planner)
    assert len(first.actions) == 2  # one cycle may move several replicas
    planner.record_evicted(first.actions[0].workload)
    clock[0] += 30
    again = decide_once(state, TAINTS, planner=planner)
    assert evicted(again) == []
    assert "cooling down" in again.skipped[0].reasons[0][1]
    clock[0] += 31
    assert len(decide_once(state, TAINTS, planner=planner).actions) == 2


def test_a_pod_with_an_eviction_under_way_is_not_chosen_again() -> None:
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    planner.in_progress["default/p1"] = "default/p1"
    state = tainted_cluster(pod("p1", "n1"))
    assert evicted(decide_once(state, TAINTS, planner=planner)) == []


def test_a_pair_whose_eviction_is_under_way_loses_no_second_pod() -> None:
    """Two replicas sharing a host, each in violation from its own side: one cycle evicts one.
    A cycle that runs while that eviction is still under way (its cooldown not started, the pod
    not yet terminating) must not take the other replica: the one eviction repairs the pair.
    Seen in the hour's soak: the pair became movable at an uncordon, and two cycles 0.1 s apart
    evicted both."""
    web = {"app": "web"}
    term = anti_affinity(web, ESXI)
    replicas = [
        pod(name, "n1", web, affinity=term, owner=("ReplicaSet", "web")) for name in ("a", "b")
    ]
    state = cluster([node("n1"), node("n2")], replicas, placements={"n1": "h1", "n2": "h2"})
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    rule = InterPodAntiAffinity(InterPodAntiAffinityArgs())

    [first] = decide_once(state, rule, planner=planner).actions
    planner.begin(first)
    again = decide_once(state, rule, planner=planner)
    assert evicted(again) == []
    reasons = dict(again.skipped[0].reasons)
    assert reasons[first.pod] == "an eviction of this pod is already under way"
    [other] = set(reasons) - {first.pod}
    assert reasons[other] == f"workload {first.workload} has an eviction under way"

    planner.end(first.pod)  # the eviction went through: the cooldown holds the pair from here
    planner.record_evicted(first.workload)
    assert evicted(decide_once(state, rule, planner=planner)) == []


# -- KubeVirt ---------------------------------------------------------------------------------


def test_live_migratable_vmi_gets_a_migration_not_an_eviction() -> None:
    state = cluster(
        [node("n1", taints=[NOSCHED]), node("n2")],
        [launcher("vm-a", "n1")],
        vmis=[vmi("vm-a", "n1")],
    )
    plan = decide_once(state, TAINTS)
    [action] = plan.actions
    assert action.outcome is Outcome.MIGRATE
    assert action.vmi == "default/vm-a"


@pytest.mark.parametrize(
    ("strategy", "migratable", "outcome"),
    [
        ("LiveMigrate", True, "migrate"),
        ("LiveMigrateIfPossible", True, "migrate"),
        ("LiveMigrateIfPossible", False, "stay"),
        ("LiveMigrate", False, "stay"),
        ("None", True, "stay"),
        (None, True, "stay"),
    ],
)
def test_vmi_eviction_strategy(strategy: str | None, migratable: bool, outcome: str) -> None:
    state = cluster(
        [node("n1", taints=[NOSCHED]), node("n2")],
        [launcher("vm-a", "n1")],
        vmis=[vmi("vm-a", "n1", strategy=strategy, migratable=migratable)],
    )
    plan = decide_once(state, TAINTS)
    if outcome == "migrate":
        assert [a.outcome for a in plan.actions] == [Outcome.MIGRATE]
    else:
        assert plan.actions == []
        assert [s.vmi for s in plan.stays] == ["default/vm-a"]


@pytest.mark.parametrize("consented", [True, False], ids=["annotated", "not-annotated"])
def test_a_vm_that_cannot_migrate_is_restarted_only_with_its_owners_consent(
    consented: bool,
) -> None:
    annotations = {"descheduler.alpha.kubernetes.io/evict": "true"} if consented else {}
    state = cluster(
        [node("n1", taints=[NOSCHED]), node("n2")],
        [launcher("vm-a", "n1")],
        vmis=[vmi("vm-a", "n1", migratable=False, annotations=annotations)],
    )
    plan = decide_once(state, TAINTS)
    if consented:
        [action] = plan.actions
        assert (action.outcome, action.pod, action.target) == (
            Outcome.EVICT, "default/virt-launcher-vm-a-abcde", "n2"
        )  # fmt: skip
        assert "restarted elsewhere, as descheduler.alpha.kubernetes.io/evict allows" in action.why
        assert plan.stays == []
    else:
        assert plan.actions == []
        assert [s.vmi for s in plan.stays] == ["default/vm-a"]


@pytest.mark.parametrize(
    ("restart_required", "template_affinity", "waiting"),
    [
        (True, "apart", "affinity"),
        (True, None, ""),  # the change that needs the restart is not about placement
        (False, "apart", ""),  # LiveUpdate: KubeVirt applies it to the VMI itself
    ],
)
def test_a_vms_new_placement_waiting_for_a_restart(
    restart_required: bool, template_affinity: str | None, waiting: str
) -> None:
    apart = anti_affinity({"app": "db"}, ESXI)
    machine = vm(
        "db-0",
        template_affinity=apart if template_affinity else None,
        restart_required=restart_required,
    )
    running = vmi("db-0", "n1", owner=("VirtualMachine", "db-0"))
    assert placement_awaiting_restart(machine, running) == waiting
    assert placement_awaiting_restart(machine, None) == ""


def test_migration_limits_hold_with_ten_violating_vmis() -> None:
    names = [f"vm-{i}" for i in range(10)]
    hosts = ["n1", "n2", "n3"]
    launchers = [launcher(n, hosts[i % 3]) for i, n in enumerate(names)]
    state = cluster(
        [node(h, taints=[NOSCHED]) for h in hosts] + [node("free-1"), node("free-2")],
        launchers,
        vmis=[vmi(n, hosts[i % 3]) for i, n in enumerate(names)],
    )
    plan = decide_once(state, TAINTS)
    assert len(plan.actions) == 5  # per cluster
    per_node: dict[str, int] = {}
    for action in plan.actions:
        per_node[action.node] = per_node.get(action.node, 0) + 1
    assert max(per_node.values()) <= 2  # outbound per node
    custom = decide_once(
        state,
        TAINTS,
        settings=PlannerSettings(migrations=MigrationLimits(per_cluster=10, outbound_per_node=1)),
    )
    assert len(custom.actions) == 3


def test_migration_limits_come_from_the_kubevirt_cr_and_our_config_overrides_them() -> None:
    names = [f"vm-{i}" for i in range(6)]
    hosts = ["n1", "n2", "n3"]
    state = cluster(
        [node(h, taints=[NOSCHED]) for h in hosts] + [node("free-1"), node("free-2")],
        [launcher(n, hosts[i % 3]) for i, n in enumerate(names)],
        vmis=[vmi(n, hosts[i % 3]) for i, n in enumerate(names)],
    )
    state.upsert_kubevirt(decode_kubevirt(json.dumps(kubevirt_json("v1.6.0", per_cluster=3))))
    assert len(decide_once(state, TAINTS).actions) == 3  # the CR's, outbound per node default 2
    override = PlannerSettings(migrations=MigrationLimits(per_cluster=4, outbound_per_node=2))
    assert len(decide_once(state, TAINTS, settings=override).actions) == 4


def test_a_kubevirt_cr_allowing_zero_parallel_migrations_gets_none_asked() -> None:
    # KubeVirt reads the CR over its defaults: an explicit 0 lets no migration run, so asking
    # for one would only leave it Pending. 0 is not "unset".
    state = cluster(
        [node("n1", taints=[NOSCHED]), node("free-1")],
        [launcher("vm-a", "n1")],
        vmis=[vmi("vm-a", "n1")],
    )
    state.upsert_kubevirt(decode_kubevirt(json.dumps(kubevirt_json("v1.6.0", per_cluster=0))))
    plan = decide_once(state, TAINTS)
    assert plan.actions == []
    assert [skip.rule for skip in plan.skipped] != []


@pytest.mark.parametrize(
    ("version", "pinned"),
    [("v1.5.0", True), ("v1.6.2", True), ("v1.4.1", False), ("", False), (None, False)],
)
def test_a_migration_is_pinned_to_its_target_where_kubevirt_takes_added_node_selector(
    version: str | None, pinned: bool
) -> None:
    state = cluster(
        [node("n1", taints=[NOSCHED]), node("n2", {"kubernetes.io/hostname": "n2.example"})],
        [launcher("vm-a", "n1")],
        vmis=[vmi("vm-a", "n1")],
    )
    if version is not None:
        state.upsert_kubevirt(decode_kubevirt(json.dumps(kubevirt_json(version))))
    [action] = decide_once(state, TAINTS).actions
    assert action.target == "n2"
    assert action.pinned_hostname == ("n2.example" if pinned else "")


def test_migrations_in_flight_count_against_the_limits() -> None:
    from hostaffinity.descheduler.core.kubevirt import decode_migration

    state = cluster(
        [node("n1", taints=[NOSCHED]), node("n2")],
        [launcher("vm-a", "n1"), launcher("vm-b", "n1")],
        vmis=[vmi("vm-a", "n1"), vmi("vm-b", "n1")],
    )
    for name in ("x", "y"):
        state.upsert_migration(
            decode_migration(
                f'{{"metadata": {{"name": "{name}", "namespace": "default"}},'
                f' "spec": {{"vmiName": "vm-{name}"}}, "status": {{"phase": "Running",'
                ' "migrationState": {"sourceNode": "n1"}}}'
            )
        )
    plan = decide_once(state, TAINTS)
    assert plan.actions == []
    assert "outbound" in plan.skipped[0].reasons[0][1]


def test_anti_affine_pair_prefers_the_pod_that_can_move() -> None:
    web = {"app": "web"}
    term = anti_affinity(web)
    state = cluster(
        [node("n1"), node("n2")],
        [
            pod("new", "n1", web, affinity=term, created_minutes_ago=1, owner=("DaemonSet", "ds")),
            pod("old", "n1", web, affinity=term, created_minutes_ago=90),
        ],
    )
    plan = decide_once(state, InterPodAntiAffinity(InterPodAntiAffinityArgs()))
    assert evicted(plan) == ["default/old"]
    assert plan.actions[0].why == (
        "default/old chosen because default/new stays: pod belongs to a DaemonSet"
    )


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("5 minutes")


def test_seed_002_a_rule_added_to_a_running_vm_moves_it_live() -> None:
    """The VM's new anti-affinity reached the VMI spec, not its virt-launcher pod (immutable);
    the descheduler reads the VMI's rules and migrates it instead of waiting for a restart."""
    from hostaffinity.descheduler.core.kubevirt import decode_vmi

    apart = anti_affinity({"app": "fedora"})
    state = cluster(
        [node("n1"), node("n2")],
        [launcher("vm-a", "n1", {"app": "fedora"}), launcher("vm-b", "n1", {"app": "fedora"})],
        vmis=[vmi("vm-a", "n1"), vmi("vm-b", "n1")],
    )
    strategy = InterPodAntiAffinity(InterPodAntiAffinityArgs())
    assert decide_once(state, strategy).actions == []
    edited = vmi_json("vm-a", "n1")
    edited["spec"]["affinity"] = apart
    state.upsert_vmi(decode_vmi(json.dumps(edited)))
    plan = decide_once(state, strategy)
    assert [(a.outcome, a.target) for a in plan.actions] == [(Outcome.MIGRATE, "n2")]
    state.upsert_vmi(vmi("vm-a", "n1"))  # the rule is taken back
    assert decide_once(state, strategy).actions == []


def test_a_refused_eviction_is_decided_again_after_its_backoff_despite_the_cooldown() -> None:
    clock = [1000.0]
    planner = EvictionPlanner(
        PlannerSettings(cooldown_seconds=600), EvictionLimits(), lambda: clock[0]
    )
    state = tainted_cluster(pod("p1", "n1"), pod("p2", "n1"))
    planner.record_evicted("default/ReplicaSet/web-rs")  # p1 went; p2's eviction got a 429
    planner.retry_later("default/p2", 5.0, attempts=1)
    waiting = decide_once(state, TAINTS, planner=planner)
    assert evicted(waiting) == []
    reasons = dict(r for s in waiting.skipped for r in s.reasons)
    assert "trying again" in reasons["default/p2"]
    assert "cooling down" in reasons["default/p1"]
    clock[0] += 6
    due = decide_once(state, TAINTS, planner=planner)
    assert evicted(due) == ["default/p2"]  # finishing what was decided is not a loop


def test_a_due_retry_whose_rule_now_holds_is_dropped() -> None:
    clock = [1000.0]
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits(), lambda: clock[0])
    planner.retry_later("default/p", 1.0, attempts=3)
    clock[0] += 2
    state = cluster([node("n1"), node("n2")], [pod("p", "n1")])  # the taint is gone
    assert evicted(decide_once(state, TAINTS, planner=planner)) == []
    assert planner.retrying == {}
