"""`hostaffinity topology` over two vCenters: datacenter names, cluster and host moids repeat
across vCenters (two vcsims both have DC0, domain-c7 and host-12), and each stays its own."""

from __future__ import annotations

import msgspec

from hostaffinity.affinity.model import Node, ObjectMeta
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.cli.topology import render_topology, topology_report
from hostaffinity.schema import EsxiHost, host_id
from tests.platform.bus_values import node_placement


def _host(vcenter: str, name: str) -> EsxiHost:
    return EsxiHost(
        moid="host-12",
        name=name,
        label=name,
        cluster_moid="domain-c7",
        cluster_name="cluster-a",
        datacenter="dc-1",
        connection_state="connected",
        in_maintenance_mode=False,
        vcenter=vcenter,
    )


def test_hosts_with_the_same_moid_in_two_vcenters_stay_apart() -> None:
    east, west = "vc-east", "vc-west"
    placements = {
        node: msgspec.structs.replace(
            node_placement(node, "host-12"), vcenter=vcenter, host_name=name
        )
        for node, vcenter, name in (("n1", east, "esx-e1"), ("n2", west, "esx-w1"))
    }
    snapshot = ClusterSnapshot(
        nodes={n: Node(metadata=ObjectMeta(name=n)) for n in placements},
        placements=placements,
        hosts={
            host_id("host-12", east): _host(east, "esx-e1"),
            host_id("host-12", west): _host(west, "esx-w1"),
        },
    )
    report = topology_report(snapshot)
    assert [(d.vcenter, d.name) for d in report.datacenters] == [(east, "dc-1"), (west, "dc-1")]
    hosts = {
        d.vcenter: [(h.name, [n.name for n in h.nodes]) for c in d.clusters for h in c.hosts]
        for d in report.datacenters
    }
    assert hosts == {east: [("esx-e1", ["n1"])], west: [("esx-w1", ["n2"])]}
    rendered = render_topology(report)
    assert "dc-1 (vc-east)" in rendered
    assert "dc-1 (vc-west)" in rendered
    # Hosts as `what-if` takes them: the name repeats across vCenters too.
    assert "vc-east/esx-e1" in rendered
    assert "vc-west/esx-w1" in rendered


def test_a_host_record_that_names_no_vcenter_is_the_only_vcenter_s() -> None:
    placement = node_placement("n1", "host-12")
    record = msgspec.structs.replace(_host("", "host-12.esx.example.com"), vcenter="")
    snapshot = ClusterSnapshot(
        nodes={"n1": Node(metadata=ObjectMeta(name="n1"))},
        placements={"n1": placement},
        hosts={"host-12": record},
    )
    (datacenter,) = topology_report(snapshot).datacenters
    ((host,),) = [c.hosts for c in datacenter.clusters]
    assert host.connection_state == "connected"  # the record was found for the placed host
    assert [n.name for n in host.nodes] == ["n1"]
