"""The fleet view read as an estate: topology, exposure within and across clusters, and what
each cluster loses with one host (pure, from the bucket's entries)."""

from __future__ import annotations

import msgspec

from hostaffinity.affinity.fleet import (
    exposed_replicas,
    exposure,
    find_host,
    losses,
    read_view,
    topology,
)
from hostaffinity.schema import (
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_host_id,
    fleet_key,
    node_key,
    workload_key,
)

UUID = "vc-1"


def node(name: str, host: str) -> NodePlacement:
    return NodePlacement(
        node=name, vm_moid=f"vm-{name}", bios_uuid="", instance_uuid="", host_moid=host,
        host_name=f"{host}.example", host_label=host, cluster_moid="c1", cluster_name="c1",
        datacenter="dc", vcenter="vc", observed_at="", version=1, vcenter_uuid=UUID,
    )  # fmt: skip


def workload(cluster: str, name: str, hosts: list[str], group: str = "") -> WorkloadPlacement:
    replicas = [
        ReplicaPlacement(
            pod=f"{name}-{i}", node=f"{cluster}-n{i}", host_id=fleet_host_id(UUID, h, h),
            host_name=f"{h}.example",
        )
        for i, h in enumerate(hosts)
    ]  # fmt: skip
    return WorkloadPlacement(
        cluster=cluster, namespace="shop", kind="Deployment", name=name, fleet_group=group,
        replicas=replicas,
    )  # fmt: skip


def entries() -> dict[str, bytes]:
    found = {}
    for cluster, nodes in {"a": ["esx-1", "esx-2"], "b": ["esx-1", "esx-3"]}.items():
        for i, host in enumerate(nodes):
            found[fleet_key(cluster, node_key(f"{cluster}-n{i}"))] = msgspec.json.encode(
                node(f"{cluster}-n{i}", host)
            )
    for cluster, value in (
        ("a", workload("a", "web", ["esx-1", "esx-1"])),  # both replicas on one host
        ("a", workload("a", "db", ["esx-1", "esx-2"], group="payments")),
        ("b", workload("b", "db", ["esx-1", "esx-3"], group="payments")),  # esx-1 again
        ("b", workload("b", "api", ["esx-3"])),
    ):
        key = fleet_key(cluster, workload_key("shop", "Deployment", value.name))
        found[key] = msgspec.json.encode(value)
    found[fleet_key("b", workload_key("shop", "Deployment", "bad"))] = b"{not json"
    return found


def test_topology_lists_each_host_with_every_cluster_s_nodes() -> None:
    rows = topology(read_view(entries()))
    assert [(r.host_name, r.nodes) for r in rows] == [
        ("esx-1.example", {"a": ["a-n0"], "b": ["b-n0"]}),
        ("esx-2.example", {"a": ["a-n1"]}),
        ("esx-3.example", {"b": ["b-n1"]}),
    ]


def test_exposure_finds_a_workload_and_a_fleet_group_across_clusters() -> None:
    view = read_view(entries())
    assert view.undecodable == [fleet_key("b", workload_key("shop", "Deployment", "bad"))]
    found = exposure(view)
    assert [(e.subject, e.host_name, e.clusters) for e in found] == [
        ("fleet group payments", "esx-1.example", ["a", "b"]),
        ("a:shop/Deployment/web", "esx-1.example", ["a"]),
    ]
    assert exposed_replicas(found) == {
        ("a", "fleet-group"): 1,
        ("b", "fleet-group"): 1,
        ("a", "workload"): 2,
    }


def test_a_host_failure_names_every_cluster_s_losses() -> None:
    view = read_view(entries())
    host = find_host(view, "esx-1")
    assert host == fleet_host_id(UUID, "esx-1", "esx-1")
    lost = {loss.cluster: loss for loss in losses(view, host)}
    assert lost["a"].nodes == ("a-n0",)
    assert lost["a"].workloads == (("shop/Deployment/db", 1, 2), ("shop/Deployment/web", 2, 2))
    assert lost["a"].down == ["shop/Deployment/web"]
    assert lost["b"].workloads == (("shop/Deployment/db", 1, 2),)
    assert lost["b"].groups == ("payments",)
    assert find_host(view, "esx-9") is None
