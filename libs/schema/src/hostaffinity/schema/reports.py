"""What `hostaffinity topology|exposure|what-if maintenance -o json` print: a stable contract.

Scripts and CI jobs read these documents, so they follow the event rules (new fields at the end
with defaults, never a changed type) and `make proto` publishes their JSON Schema in proto/.
Lists are in a fixed order (documented per field), so two runs over one cluster print the same
bytes.
"""

from typing import Literal

import msgspec

Coverage = Literal["required", "preferred", "none"]
Verdict = Literal["moves", "unsatisfiable", "no-node", "no-room"]


class _Report(msgspec.Struct, frozen=True, kw_only=True):
    """Base: snake_case JSON names, as the rest of the schema."""


class NodeView(_Report, frozen=True):
    """A Kubernetes node (a VM) and the assigned, running pods on it."""

    name: str
    vm_moid: str = ""
    pods: int = 0
    unschedulable: bool = False


class HostView(_Report, frozen=True):
    """An ESXi host; `connection_state` is "unknown" when the KV has no record of the host.
    Nodes sorted by name."""

    name: str
    moid: str
    label: str
    connection_state: str
    in_maintenance_mode: bool
    nodes: list[NodeView]


class ClusterView(_Report, frozen=True):
    """A vSphere cluster; hosts sorted by name."""

    name: str
    moid: str
    hosts: list[HostView]


class DatacenterView(_Report, frozen=True):
    """A datacenter; clusters sorted by name."""

    name: str
    clusters: list[ClusterView]


class TopologyReport(_Report, frozen=True):
    """`hostaffinity topology -o json`: datacenter → cluster → host → node, then the nodes with
    no known ESXi host (no placement in the topology KV), sorted by name."""

    datacenters: list[DatacenterView]
    unplaced_nodes: list[NodeView]


class ExposedWorkload(_Report, frozen=True):
    """A workload whose assigned replicas share an ESXi host.

    `share` is `on_worst_host / replicas`: the fraction one host failure takes. `coverage` is the
    strongest host-level anti-affinity rule its pods carry that selects all of its replicas
    (the physical reading of hostname terms included). `drs_rule`: a DrsOwnership record in the
    `hostaffinity-drs` bucket (not being removed) names one of its pods.
    """

    kind: str
    namespace: str
    name: str
    replicas: int
    hosts: int
    worst_host: str
    on_worst_host: int
    share: float
    unplaced: int
    coverage: Coverage
    drs_rule: bool = False


class ExposureReport(_Report, frozen=True):
    """`hostaffinity exposure -o json`; workloads worst first (share, then replicas on the worst
    host, then kind, namespace and name)."""

    min_replicas: int
    workloads: list[ExposedWorkload]


class PodMove(_Report, frozen=True):
    """One pod that must leave the hosts: where it would go, or why it could not.

    `verdict`: "moves" (a node passes every filter and has room), "unsatisfiable" (a required
    host-level rule rejects every node that passes the other filters), "no-node" (no node passes
    the filters for another reason: taints, node affinity, cordons), "no-room" (nodes pass the
    filters but none has the requested resources or a free pod slot).
    `vmi` names the KubeVirt VirtualMachineInstance a virt-launcher pod runs (it moves by live
    migration); `to_node` is empty unless `verdict` is "moves"; `reason` is kube-scheduler's
    summary, or the resources that do not fit.
    """

    pod: str
    workload: str
    from_node: str
    verdict: Verdict
    to_node: str = ""
    reason: str = ""
    vmi: str = ""


class UnsatisfiableRule(_Report, frozen=True):
    """A required host-level rule a moving pod could no longer satisfy anywhere."""

    pod: str
    rule: str


class MaintenanceReport(_Report, frozen=True):
    """`hostaffinity what-if maintenance -o json`. `hosts` as resolved (label values, sorted),
    `nodes` on them (sorted), `moves` sorted by pod; `ok` is false when any pod has nowhere to go
    (the command then exits 1)."""

    hosts: list[str]
    nodes: list[str]
    moves: list[PodMove]
    unsatisfiable_rules: list[UnsatisfiableRule]
    ok: bool
