"""Values of the `hostaffinity-topology` KV bucket, and the dead-letter record."""

import msgspec


class NodePlacement(msgspec.Struct, frozen=True, kw_only=True):
    """Where a Kubernetes node's VM runs now: the value of `node.<node-name>`.

    `version` grows with every change the node-labeller observes in one vCenter, so a reader can
    tell which of two placements is newer.
    """

    node: str
    vm_moid: str
    bios_uuid: str
    instance_uuid: str
    host_moid: str
    host_name: str
    host_label: str
    cluster_moid: str
    cluster_name: str
    datacenter: str
    vcenter: str
    observed_at: str
    version: int
    # Failure domains of the host, as label values, from vSphere tags (empty: none configured,
    # none tagged, or the tags could not be read).
    zone: str = ""
    region: str = ""
    rack: str = ""
    # vCenter's instance UUID (`content.about.instanceUuid`): with `host_moid`, the host's
    # identity across installs (fleet.fleet_host_id); empty where the labeller has not read it.
    vcenter_uuid: str = ""


class EsxiHost(msgspec.Struct, frozen=True, kw_only=True):
    """An ESXi host as vCenter last described it: the value of `host.<host-moid>` (of
    `host.<vcenter>.<host-moid>` where the node-labeller works with several vCenters).

    `entering_maintenance` is true while an EnterMaintenanceMode task on the host is queued or
    running (DRS evacuating it), before `in_maintenance_mode` turns true.
    """

    moid: str
    name: str
    label: str
    cluster_moid: str
    cluster_name: str
    datacenter: str
    connection_state: str
    in_maintenance_mode: bool
    # Its failure domains, as in NodePlacement.
    zone: str = ""
    region: str = ""
    rack: str = ""
    entering_maintenance: bool = False
    # The vCenter the host is in, named as placements name it (empty in records written before
    # several vCenters were supported; the node-labeller rewrites them).
    vcenter: str = ""
    # vCenter's instance UUID, as in NodePlacement.
    vcenter_uuid: str = ""


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """A message a service could not decode, kept with the reason in `HOSTAFFINITY_DLQ`."""

    service: str
    subject: str
    reason: str
    payload: bytes
    received_at: str
    # The original's size in bytes; `payload` holds only its first bytes when this is larger.
    payload_size: int = 0


class Undecodable(msgspec.Struct, frozen=True):
    """A value under a topology key that is not the schema's type (garbage, wrong types)."""

    reason: str


class TopologySnapshot(msgspec.Struct, frozen=True):
    """The latest value of every live key of the topology bucket: what a resync compares with what
    it last wrote. Here rather than beside the bucket's reader so that a pure core can take one."""

    nodes: dict[str, NodePlacement | Undecodable]
    hosts: dict[str, EsxiHost | Undecodable]
