"""The HA audit's arithmetic: which node VMs of an owned anti-affinity rule vSphere HA could not
restart after one host failure, by hosts left, their state and HA's settings."""

from __future__ import annotations

import pytest

from hostaffinity.cli.ha_audit import HaAudit
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.schema import ClusterHaSettings, DrsOwnership, EsxiHost
from tests.platform.bus_values import node_placement

VCENTER = "vcenter.example.com"  # bus_values' placements: this vCenter, cluster domain-c7
CLUSTER = "domain-c7"
RULE = "hostaffinity-anti-web"


def _host(moid: str, state: str) -> EsxiHost:
    return EsxiHost(
        moid=moid,
        name=f"{moid}.esx.example.com",
        label=moid,
        cluster_moid=CLUSTER,
        cluster_name="C0",
        datacenter="DC0",
        connection_state="notResponding" if state == "down" else "connected",
        in_maintenance_mode=state == "maintenance",
    )


def snapshot(
    hosts: dict[str, str],
    vms: dict[str, str],
    *,
    ha: bool = True,
    respect: bool = True,
    state: str = "applied",
) -> ClusterSnapshot:
    """Hosts (moid → up|maintenance|down), node VMs (node → host), one rule over every VM."""
    rule = DrsOwnership(
        vcenter=VCENTER,
        cluster_moid=CLUSTER,
        name=RULE,
        kind="vm-anti-affinity",
        vms=sorted(f"vm-{node}" for node in vms),
        pods=[f"default/{node}-pod" for node in vms],
        state=state,  # type: ignore[arg-type]
    )
    settings = ClusterHaSettings(
        vcenter=VCENTER, cluster_moid=CLUSTER, enabled=ha, respects_vm_anti_affinity=respect
    )
    return ClusterSnapshot(
        placements={node: node_placement(node, host) for node, host in vms.items()},
        hosts={moid: _host(moid, s) for moid, s in hosts.items()},
        drs_records=[rule],
        ha_settings={(VCENTER, CLUSTER): settings},
    )


UP3 = {"h0": "up", "h1": "up", "h2": "up"}
ONE_EACH = {"n0": "h0", "n1": "h1", "n2": "h2"}


@pytest.mark.parametrize(
    ("hosts", "vms", "options", "stranded"),
    [
        pytest.param(UP3, ONE_EACH, {}, ["vm-n0"], id="as-many-vms-as-hosts"),
        pytest.param(UP3 | {"h3": "up"}, ONE_EACH, {}, [], id="a-spare-host"),
        pytest.param(UP3 | {"h3": "maintenance"}, ONE_EACH, {}, ["vm-n0"], id="spare-in-maint"),
        pytest.param(UP3 | {"h3": "down"}, ONE_EACH, {}, ["vm-n0"], id="spare-not-responding"),
        pytest.param(UP3, {"n0": "h0", "n1": "h1"}, {}, [], id="fewer-vms-than-hosts"),
        pytest.param(UP3, {"n0": "h0", "n1": "h0", "n2": "h1"}, {}, ["vm-n1"], id="two-on-one"),
        pytest.param(UP3, ONE_EACH, {"ha": False}, [], id="ha-off"),
        pytest.param(UP3, ONE_EACH, {"respect": False}, [], id="ha-breaks-rules"),
        pytest.param(UP3, ONE_EACH, {"state": "pending"}, [], id="rule-not-in-vcenter-yet"),
    ],
)
def test_vms_that_could_not_restart_after_h0_fails(
    hosts: dict[str, str], vms: dict[str, str], options: dict[str, bool], stranded: list[str]
) -> None:
    found = HaAudit(snapshot(hosts, vms, **options)).unrestartable_after([(VCENTER, "h0")])
    assert [vm.vm_moid for vm in found] == stranded
    assert all(vm.rule == RULE and "h0.esx.example.com" not in vm.hosts_left for vm in found)


def test_the_same_moid_failing_in_another_vcenter_strands_nothing_here() -> None:
    """Moids repeat across vCenters: another vCenter's h0 is not this rule's h0."""
    audit = HaAudit(snapshot(UP3, ONE_EACH))
    assert audit.unrestartable_after([("vc-elsewhere", "h0")]) == []
    assert audit.clusters_of_rules_on([("vc-elsewhere", "h0")]) == []
    assert audit.clusters_of_rules_on([(VCENTER, "h0")]) == [(VCENTER, CLUSTER)]


def test_the_hosts_left_are_named_and_every_host_of_the_rule_counts_for_status() -> None:
    taken = snapshot(UP3, ONE_EACH)
    [vm] = HaAudit(taken).unrestartable_after([(VCENTER, "h0")])
    assert (vm.node, vm.host, vm.hosts_left) == (
        "n0",
        "h0.esx.example.com",
        ["h1.esx.example.com", "h2.esx.example.com"],
    )
    assert vm.pods == ["default/n0-pod", "default/n1-pod", "default/n2-pod"]
    by_rule = HaAudit(taken).rules_without_failover_room()
    assert [v.vm_moid for v in by_rule[RULE]] == ["vm-n0", "vm-n1", "vm-n2"]
    assert HaAudit(snapshot(UP3 | {"h3": "up"}, ONE_EACH)).rules_without_failover_room() == {}
