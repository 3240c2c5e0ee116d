"""What the commands say of other installs on the same vCenter and of DRS objects vCenter does not
hold, from the drs-translator's cluster reports: `status`, `explain pod`, `what-if maintenance`
and `what-if host-failure`."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.cli.drs_attention import cluster_identity
from hostaffinity.cli.host_failure import host_failure_report
from hostaffinity.cli.maintenance import maintenance_report
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.cli.status import render_status, status_report
from hostaffinity.schema import (
    DrsClusterReport,
    DrsName,
    EsxiHost,
    NodeLabelled,
    OtherInstallRule,
    SharedHostsWarning,
    UnprotectedGroup,
)

VCENTER, CLUSTER = "vc", "domain-c7"
THEIRS = str(DrsName("vm-anti-affinity", "cluster-b", "b" * 12))
OURS = str(DrsName("vm-anti-affinity", "cluster-a", "a" * 12))
NOW = datetime(2026, 11, 28, tzinfo=UTC)


def host(name: str) -> EsxiHost:
    return EsxiHost(
        moid=f"host-{name}",
        name=name,
        label=name,
        cluster_moid=CLUSTER,
        cluster_name="C0",
        datacenter="DC0",
        connection_state="connected",
        in_maintenance_mode=False,
        vcenter=VCENTER,
    )


def their_rule(vms: int) -> OtherInstallRule:
    return OtherInstallRule(
        name=THEIRS,
        install="cluster-b",
        kind="vm-anti-affinity",
        vms=[f"vm-{i}" for i in range(vms)],
    )


def snapshot(report: DrsClusterReport) -> ClusterSnapshot:
    hosts = {h.moid: h for h in (host("esx-0"), host("esx-1"), host("esx-2"))}
    return ClusterSnapshot(hosts=hosts, drs_reports=[report])


def report(**fields: object) -> DrsClusterReport:
    return DrsClusterReport(vcenter=VCENTER, cluster_moid=CLUSTER, cluster="cluster-a", **fields)  # type: ignore[arg-type]


def test_status_names_each_group_vcenter_does_not_hold_and_each_rule_on_shared_hosts() -> None:
    refused = UnprotectedGroup(
        name=OURS,
        kind="vm-anti-affinity",
        reason="refused",
        message="vCenter refused it: InvalidArgument",
        pods=["kube-system/coredns-0", "kube-system/coredns-1"],
        since="2026-11-28T05:00:00Z",
    )
    warning = SharedHostsWarning(
        risk="no-failover-room", rule=THEIRS, install="cluster-b", vms=3, message="no room"
    )
    made = status_report(
        NOW, {}, [], 0, [], drs_reports=[report(unprotected=[refused], shared_hosts=[warning])]
    )
    assert made.drs_not_held == [
        f"DRS anti-affinity rule {OURS} (cluster {CLUSTER} of vCenter {VCENTER}) is not in "
        "vCenter since 2026-11-28T05:00:00Z: vCenter refused it (vCenter refused it: "
        "InvalidArgument); it is for pods kube-system/coredns-0, kube-system/coredns-1"
    ]
    assert made.shared_hosts == [f"no room (cluster {CLUSTER} of vCenter {VCENTER})"]
    assert set(made.drs_not_held + made.shared_hosts) <= set(made.problems)
    assert "needs attention:" in render_status(made)


def test_status_shows_the_cluster_identity_and_says_when_services_disagree() -> None:
    def labelled(source: str, cluster: str) -> NodeLabelled:
        return NodeLabelled(
            id=source,
            occurred_at="t",
            source=source,
            cluster=cluster,
            node="n",
            labels={},
            version=1,
        )

    assert cluster_identity([labelled("node-labeller", "prod-east")]) == ("prod-east", [])
    same = status_report(NOW, {}, [labelled("node-labeller", "prod-east")], 0, [])
    assert same.cluster == "prod-east"
    assert render_status(same).startswith("cluster: prod-east")
    _, disagreement = cluster_identity(
        [labelled("node-labeller", "prod-east"), labelled("descheduler", "3f1c-uid")]
    )
    assert "shared.cluster.name" in disagreement[0]


def engine() -> AffinityEngine:
    return AffinityEngine(ClusterIndex())


def test_what_if_maintenance_says_another_install_s_rule_would_keep_the_host_busy() -> None:
    found = maintenance_report(
        snapshot(report(other_installs=[their_rule(3)])), engine(), ["esx-0"]
    )
    assert not found.ok
    (sentence,) = found.blocked_by_other_installs
    assert THEIRS in sentence
    assert "install cluster-b" in sentence
    spare = maintenance_report(
        snapshot(report(other_installs=[their_rule(2)])), engine(), ["esx-0"]
    )
    assert (spare.ok, spare.blocked_by_other_installs) == (True, [])


def test_what_if_host_failure_names_another_install_s_rule_with_no_failover_room() -> None:
    found = host_failure_report(snapshot(report(other_installs=[their_rule(3)])), engine(), "esx-1")
    (sentence,) = found.other_installs_unrestartable
    assert THEIRS in sentence
    disabled = msgspec.structs.replace(their_rule(3), enabled=False)
    quiet = host_failure_report(snapshot(report(other_installs=[disabled])), engine(), "esx-1")
    assert quiet.other_installs_unrestartable == []
