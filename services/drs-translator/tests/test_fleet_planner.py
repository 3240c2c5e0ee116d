"""The fleet rules of one vCenter: one VM-VM anti-affinity rule per group and vSphere cluster over
the VMs holding members of any install, counted against the hosts like the install's own."""

from collections.abc import Iterable, Mapping

import msgspec
import pytest

from hostaffinity.affinity.fleet_groups import FleetMembers, own_members
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.core.fleet_planner import FleetRulePlan, plan_fleet_rules
from hostaffinity.schema import (
    LABEL_FLEET_GROUP,
    EsxiHost,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_rule_name,
)
from tests.platform.builders.drs import VCENTER, host, placement, pod, topology

C1, C2 = "domain-c1", "domain-c2"
RULE = fleet_rule_name(C1, "db")


def member(name: str, node: str, group: str = "db") -> Pod:
    return pod(name, node, {LABEL_FLEET_GROUP: group})


def theirs(
    cluster: str, pod_name: str, host_name: str, vm: str, *, group: str = "db", moid: str = ""
) -> WorkloadPlacement:
    """Another install's member as the fleet view holds it (host id: vCenter UUID / moid)."""
    replica = ReplicaPlacement(
        pod=pod_name,
        host_name=host_name,
        host_id=f"vc-uuid/{moid or host_name}",
        vm_moid=vm,
        vsphere_cluster_moid=C1,
    )
    return WorkloadPlacement(
        cluster=cluster,
        namespace="shop",
        kind="StatefulSet",
        name=pod_name,
        fleet_group=group,
        replicas=[replica],
    )


def fleet_plan(
    pods: Iterable[Pod],
    others: Iterable[WorkloadPlacement] = (),
    *,
    topo: tuple[dict[str, NodePlacement], dict[str, EsxiHost]] | None = None,
    recorded: Mapping[str, list[str]] | None = None,
) -> list[FleetRulePlan]:
    placements, hosts = topo or topology(nodes=6, hosts=3)
    index = ClusterIndex()
    for p in pods:
        index.upsert_pod(p)
    fleet = FleetMembers("me")
    for summary in others:
        fleet.put(f"{summary.cluster}.workload.{summary.name}", summary)
    return plan_fleet_rules(own_members(index), placements, hosts, fleet, VCENTER, recorded)


def summary(plans: list[FleetRulePlan]) -> list[tuple[str, str, tuple[str, ...] | None, bool]]:
    return [(p.name, p.group, None if p.rule is None else p.rule.vms, p.own) for p in plans]


# topology(): node<i> on vm<i> on host h<(i-1) mod 3>, all in domain-c1.
@pytest.mark.parametrize(
    ("pods", "others", "expected"),
    [
        pytest.param(
            [member("db-0", "node1")],
            [theirs("east", "db-0", "h1", "vm2")],
            [(RULE, "db", ("vm1", "vm2"), True)],
            id="a member here and one of another install: a rule over both VMs",
        ),
        pytest.param(
            [member("db-0", "node1")],
            [],
            [(RULE, "db", None, True)],
            id="one VM alone: no rule",
        ),
        pytest.param(
            [member("db-0", "node1"), member("db-1", "node1")],
            [],
            [(RULE, "db", None, True)],
            id="two members on one VM: a rule cannot split a VM",
        ),
        pytest.param(
            [member("db-0", "node1"), member("db-1", "node2")],
            [],
            [(RULE, "db", ("vm1", "vm2"), True)],
            id="this install's members alone on two VMs",
        ),
        pytest.param(
            [member("db-0", "node1")],
            [theirs("east", "db-0", "h-elsewhere", "vm9")],
            [(RULE, "db", None, True)],
            id="another install's member on a host of no cluster of ours",
        ),
        pytest.param(
            [member("db-0", "node1")],
            [theirs("east", "db-0", "h1", "vm2", moid="host-99")],
            [(RULE, "db", None, True)],
            id="a host of the same name in another vCenter (another moid)",
        ),
        pytest.param(
            [member("db-0", "node1")],
            [theirs("east", "db-0", "h1", "")],
            [(RULE, "db", None, True)],
            id="a member whose VM the fleet view does not name",
        ),
        pytest.param(
            [member("db-0", "node1"), member("web-0", "node2", group="web")],
            [
                theirs("east", "db-0", "h1", "vm4"),
                theirs("east", "web-0", "h2", "vm5", group="web"),
            ],
            [
                (RULE, "db", ("vm1", "vm4"), True),
                (fleet_rule_name(C1, "web"), "web", ("vm2", "vm5"), True),
            ],
            id="one rule per group",
        ),
    ],
)
def test_the_rule_s_vms(
    pods: list[Pod],
    others: list[WorkloadPlacement],
    expected: list[tuple[str, str, tuple[str, ...] | None, bool]],
) -> None:
    assert summary(fleet_plan(pods, others)) == expected


def test_members_in_another_vcenter_are_not_this_one_s() -> None:
    placements, hosts = topology(nodes=6, hosts=3)
    placements["node1"] = msgspec.structs.replace(placements["node1"], vcenter="other-vc")
    plans = fleet_plan(
        [member("db-0", "node1")],
        [theirs("east", "db-0", "h1", "vm2")],
        topo=(placements, hosts),
    )
    assert plans == []


def test_more_vms_than_hosts_is_a_conflict_and_the_rule_is_held() -> None:
    plans = fleet_plan(
        [member("db-0", "node1"), member("db-1", "node2")],
        [theirs("east", "db-0", "h2", "vm7"), theirs("west", "db-0", "h0", "vm8")],
    )
    (plan,) = plans
    assert plan.conflict is not None
    assert plan.conflict.reason == "too-few-hosts"
    assert "4 VMs of fleet group db" in plan.conflict.message
    assert plan.rule is not None
    assert plan.rule.vms == ("vm1", "vm2", "vm7", "vm8")


def test_a_host_entering_maintenance_sends_the_rule_disabled() -> None:
    placements, hosts = topology(nodes=6, hosts=3)
    hosts["h2"] = host("h2", entering=True)
    (plan,) = fleet_plan(
        [member("db-0", "node1"), member("db-1", "node2")],
        [theirs("east", "db-0", "h2", "vm7")],
        topo=(placements, hosts),
    )
    assert plan.conflict is None
    assert plan.rule is not None
    assert not plan.rule.enabled
    assert "hosts h2 can enter maintenance" in plan.rule.held_because
    assert plan.maintenance_hosts == ("h2",)


def test_a_recorded_rule_this_install_has_no_member_of_is_planned_to_be_handed_over() -> None:
    """Its holder's members left; two other installs' remain: the rule is still wanted."""
    plans = fleet_plan(
        [],
        [theirs("east", "db-0", "h1", "vm2"), theirs("west", "db-0", "h2", "vm3")],
        recorded={C1: [RULE]},
    )
    assert summary(plans) == [(RULE, "db", ("vm2", "vm3"), False)]


def test_a_recorded_rule_whose_group_is_gone_everywhere_is_planned_empty() -> None:
    plans = fleet_plan([], [], recorded={C1: [RULE]})
    assert summary(plans) == [(RULE, "", None, False)]
    assert plans[0].cluster_moid == C1


def test_a_rule_in_another_cluster_is_that_cluster_s() -> None:
    placements, hosts = topology(nodes=6, hosts=3)
    placements["node4"] = placement("node4", "vm4", "x0", C2)
    hosts["x0"] = host("x0", C2)
    plans = fleet_plan([member("db-0", "node1"), member("db-1", "node4")], topo=(placements, hosts))
    assert summary(plans) == [
        (RULE, "db", None, True),
        (fleet_rule_name(C2, "db"), "db", None, True),
    ]
