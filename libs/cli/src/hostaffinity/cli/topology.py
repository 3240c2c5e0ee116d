"""`hostaffinity topology`: datacenter → vSphere cluster → ESXi host → node VMs → pod count,
with each host's region, zone and rack where vSphere tags give them.

Placements and host records come from the topology KV (what the node-labeller last saw); pod
counts are the engine index's assigned, running pods. Nodes the KV places nowhere are listed
apart, since every host-level rule treats them as unknown.
"""

from __future__ import annotations

from collections import Counter

from hostaffinity.affinity.index import counts_on_its_node
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.cli.tables import table
from hostaffinity.schema import EsxiHost, NodePlacement
from hostaffinity.schema.reports import (
    ClusterView,
    DatacenterView,
    HostView,
    NodeView,
    TopologyReport,
)

UNKNOWN_STATE = "unknown"
# Failure domains above the host, widest first, as HostView fields.
_DOMAIN_LEVELS = ("region", "zone", "rack")


def _in_cluster(placement: NodePlacement, cluster: str | None) -> bool:
    return cluster is None or cluster in (placement.cluster_name, placement.cluster_moid)


def topology_report(snapshot: ClusterSnapshot, cluster: str | None = None) -> TopologyReport:
    """The tree for every node the API knows (only `cluster`'s, by name or moid, when given).
    Datacenters, clusters and hosts are told apart by their vCenter: names and moids repeat
    across vCenters."""
    pods = Counter(p.spec.node_name for p in snapshot.pods.values() if counts_on_its_node(p))
    # (vcenter, datacenter) -> (cluster name, cluster moid) -> host moid -> nodes
    tree: dict[tuple[str, str], dict[tuple[str, str], dict[str, list[NodeView]]]] = {}
    unplaced: list[NodeView] = []
    for name in sorted(snapshot.nodes):
        node = snapshot.nodes[name]
        placement = snapshot.placements.get(name)
        view = NodeView(
            name=name,
            vm_moid=placement.vm_moid if placement else "",
            pods=pods[name],
            unschedulable=node.spec.unschedulable,
        )
        if placement is None:
            if cluster is None:
                unplaced.append(view)
            continue
        if _in_cluster(placement, cluster):
            clusters = tree.setdefault((placement.vcenter, placement.datacenter), {})
            hosts = clusters.setdefault((placement.cluster_name, placement.cluster_moid), {})
            hosts.setdefault(placement.host_moid, []).append(view)
    records = snapshot.hosts_by_vcenter
    for (vcenter, moid), host in records.items():  # hosts with no node VM still show
        if cluster is None or cluster in (host.cluster_name, host.cluster_moid):
            clusters = tree.setdefault((vcenter, host.datacenter), {})
            clusters.setdefault((host.cluster_name, host.cluster_moid), {}).setdefault(moid, [])
    datacenters = [
        DatacenterView(
            name=datacenter,
            vcenter=vcenter,
            clusters=[
                ClusterView(name=name, moid=moid, hosts=_hosts(snapshot, records, vcenter, hosts))
                for (name, moid), hosts in sorted(clusters.items())
            ],
        )
        for (vcenter, datacenter), clusters in sorted(tree.items())
    ]
    return TopologyReport(datacenters=datacenters, unplaced_nodes=unplaced)


def _hosts(
    snapshot: ClusterSnapshot,
    records: dict[tuple[str, str], EsxiHost],
    vcenter: str,
    hosts: dict[str, list[NodeView]],
) -> list[HostView]:
    views = []
    for moid, nodes in hosts.items():
        record = records.get((vcenter, moid))
        placed = next((snapshot.placements[n.name] for n in nodes), None)
        name = record.name if record else placed.host_name if placed else moid
        domains = record or placed
        views.append(
            HostView(
                name=name,
                moid=moid,
                label=record.label if record else placed.host_label if placed else "",
                connection_state=record.connection_state if record else UNKNOWN_STATE,
                in_maintenance_mode=record.in_maintenance_mode if record else False,
                nodes=nodes,
                zone=domains.zone if domains else "",
                region=domains.region if domains else "",
                rack=domains.rack if domains else "",
            )
        )
    return sorted(views, key=lambda view: (view.name, view.moid))


def render_topology(report: TopologyReport) -> str:
    """The tree as an aligned table, one row per node (a host without nodes gets one row).
    REGION, ZONE and RACK columns appear when some host has that failure domain. With several
    vCenters, a datacenter names its vCenter and a host is `<vcenter>/<name>`."""
    all_hosts = [h for d in report.datacenters for c in d.clusters for h in c.hosts]
    levels = [level for level in _DOMAIN_LEVELS if any(getattr(h, level) for h in all_hosts)]
    several = len({d.vcenter for d in report.datacenters}) > 1
    rows: list[list[str]] = []
    for datacenter in report.datacenters:
        where_dc = f"{datacenter.name} ({datacenter.vcenter})" if several else datacenter.name
        for cluster in datacenter.clusters:
            for host in cluster.hosts:
                state = host.connection_state + (
                    ", maintenance" if host.in_maintenance_mode else ""
                )
                domains = [getattr(host, level) or "-" for level in levels]
                # As `what-if` takes it: names repeat across vCenters (host_names.py).
                name = f"{datacenter.vcenter}/{host.name}" if several else host.name
                where = [where_dc, *domains, cluster.name, name, state]
                cells: list[NodeView | None] = list(host.nodes) or [None]
                rows.extend(where + _node_cells(node) for node in cells)
    for node in report.unplaced_nodes:
        rows.append(
            ["-", *["-"] * len(levels), "-", "(no known ESXi host)", "-", *_node_cells(node)]
        )
    header = ["DATACENTER", *(level.upper() for level in levels), "CLUSTER", "ESXI HOST", "STATE"]
    header += ["NODE", "VM", "PODS"]
    nodes = sum(len(h.nodes) for h in all_hosts)
    summary = (
        f"{len(all_hosts)} ESXi hosts, {nodes} placed nodes, "
        f"{len(report.unplaced_nodes)} with no known host"
    )
    return f"{table(header, rows)}\n\n{summary}"


def _node_cells(node: NodeView | None) -> list[str]:
    if node is None:
        return ["-", "-", "0"]
    name = node.name + (" (cordoned)" if node.unschedulable else "")
    return [name, node.vm_moid or "-", str(node.pods)]
