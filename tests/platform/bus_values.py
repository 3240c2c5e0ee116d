"""Values as the node-labeller writes them to the bus, for tests that need some on it: a node's
placement (topology KV), its `node.placed` and `vm.moved` events and the ESXi hosts."""

from __future__ import annotations

import msgspec

from hostaffinity.schema import EsxiHost, NodePlaced, NodePlacement, VmMoved, event_id


def node_placement(
    node: str,
    host_moid: str = "host-11",
    version: int = 1,
    *,
    host_label: str = "",
    vm_moid: str = "",
    cluster_moid: str = "domain-c7",
    vcenter: str = "vcenter.example.com",
) -> NodePlacement:
    """`node` (VM `vm_moid`, by default `vm-<node>`) on the ESXi host `host_moid` (named
    `<moid>.esx.example.com`, labelled `host_label`, by default its moid) of the vSphere
    cluster `cluster_moid` of `vcenter`."""
    return NodePlacement(
        node=node,
        vm_moid=vm_moid or f"vm-{node}",
        bios_uuid="4230c1d2-0000-0000-0000-000000000001",
        instance_uuid="5030c1d2-0000-0000-0000-000000000001",
        host_moid=host_moid,
        host_name=f"{host_moid}.esx.example.com",
        host_label=host_label or host_moid,
        cluster_moid=cluster_moid,
        cluster_name="cluster-a" if cluster_moid == "domain-c7" else cluster_moid,
        datacenter="dc-1",
        vcenter=vcenter,
        observed_at="2026-01-01T00:00:00+00:00",
        version=version,
    )


def node_placed(node: str) -> NodePlaced:
    """The event of `node` placed on host-11 (its id is deterministic, as the labeller's)."""
    return NodePlaced(
        id=event_id("node.placed", node),
        occurred_at="2026-01-01T00:00:00+00:00",
        source="node-labeller",
        node=node,
        vm_moid="vm-42",
        host_moid="host-11",
        host_name="esx-11.example.com",
        cluster_name="cluster-a",
        datacenter="dc-1",
        matched_by="provider-id",
        version=1,
    )


def vm_moved(
    node: str,
    from_host: str,
    to_host: str,
    *,
    at: str = "2026-01-01T00:00:00+00:00",
    version: int = 1,
) -> VmMoved:
    """`node`'s VM (`vm-<node>`) moved between two ESXi hosts named as their moids."""
    return VmMoved(
        id=event_id("vm.moved", node, str(version)),
        occurred_at=at,
        source="node-labeller",
        node=node,
        vm_moid=f"vm-{node}",
        from_host_moid=from_host,
        from_host_name=from_host,
        to_host_moid=to_host,
        to_host_name=to_host,
        version=version,
    )


# An ESXi host of cluster-a as the topology KV holds it.
ESXI_HOST = EsxiHost(
    moid="host-11",
    name="esx-11.example.com",
    label="esx-11.example.com",
    cluster_moid="domain-c7",
    cluster_name="cluster-a",
    datacenter="dc-1",
    connection_state="connected",
    in_maintenance_mode=False,
)
# Its neighbour in the same cluster.
OTHER_HOST = msgspec.structs.replace(ESXI_HOST, moid="host-12", name="esx-12.example.com")
