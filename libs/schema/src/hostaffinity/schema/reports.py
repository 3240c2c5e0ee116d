"""What the `hostaffinity` operator commands print with `-o json`: a stable contract.

Scripts and CI jobs read these documents, so they follow the event rules (new fields at the end
with defaults, never a changed type) and `make proto` publishes their JSON Schema in proto/.
Lists are in a fixed order (documented per field), so two runs over one cluster print the same
bytes.
"""

from typing import Literal

import msgspec

from hostaffinity.schema.drs import ClusterHaSettings
from hostaffinity.schema.readiness import ReadinessPart

Coverage = Literal["required", "preferred", "none"]
Verdict = Literal["moves", "unsatisfiable", "no-node", "no-room"]
TermState = Literal["holds", "violated", "unknown", "not-placed"]


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
    # Its failure domains from vSphere tags ("" where none is known).
    zone: str = ""
    region: str = ""
    rack: str = ""


class ClusterView(_Report, frozen=True):
    """A vSphere cluster; hosts sorted by name."""

    name: str
    moid: str
    hosts: list[HostView]


class DatacenterView(_Report, frozen=True):
    """A datacenter of one vCenter (`vcenter`, as placements name it; names and moids repeat
    across vCenters); clusters sorted by name."""

    name: str
    clusters: list[ClusterView]
    vcenter: str = ""


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
    `hostaffinity-drs` bucket (not being removed) names one of its pods. `spread` is the
    strongest topology spread over ESXi hosts its pods carry that selects all of its replicas
    (`required` for DoNotSchedule, `preferred` for ScheduleAnyway); `spread_violated` says that
    spread's skew (the fullest host's matching pods less the emptiest host's) exceeds its maxSkew.
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
    spread: Coverage = "none"
    spread_violated: bool = False


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
    """`hostaffinity what-if maintenance -o json`. `hosts` as resolved (their names, sorted;
    `<vcenter>/<name>` when the topology spans several vCenters),
    `nodes` on them (sorted), `moves` sorted by pod; `blocked_by_other_installs`: one sentence
    per enabled DRS rule of another install on the same hosts that would keep them from entering
    maintenance; `ok` is false when any pod has nowhere to go or such a rule blocks (the command
    then exits 1)."""

    hosts: list[str]
    nodes: list[str]
    moves: list[PodMove]
    unsatisfiable_rules: list[UnsatisfiableRule]
    ok: bool
    blocked_by_other_installs: list[str] = msgspec.field(default_factory=list)


class UnrestartableVm(_Report, frozen=True):
    """A node VM on the failed host that vSphere HA could not restart: every usable host left in
    its cluster (`hosts_left`, sorted) already runs a VM of the DRS anti-affinity rule `rule`,
    and HA respects VM-VM anti-affinity rules. `pods` asked for the rule (sorted)."""

    vm_moid: str
    node: str
    host: str
    cluster_moid: str
    rule: str
    pods: list[str]
    hosts_left: list[str]


class HostFailureReport(_Report, frozen=True):
    """`hostaffinity what-if host-failure HOST -o json`. `host` as resolved (its name);
    `exposed`: the pods on its nodes and where they could be rescheduled if their node VMs do
    not come back (what-if maintenance's report of that host); `ha`: vSphere HA of each cluster
    holding our anti-affinity rules over its VMs, as the drs-translator last recorded it (by
    vCenter, then cluster moid), and `ha_unknown` the moids of such clusters it has no record of;
    `unrestartable`: its node VMs HA could not restart, by rule then VM moid;
    `other_installs_unrestartable`: one sentence per DRS anti-affinity rule of another install
    on the same hosts with no host left to restart its VM on. `ok` is false when a pod has
    nowhere to go or a VM of ours could not restart (the command then exits 1). With several
    vCenters, `vcenter` is the host's, and `host`, `ha_unknown` and the hosts and clusters of
    `unrestartable` are `<vcenter>/<name or moid>` (names and moids repeat across vCenters)."""

    host: str
    exposed: MaintenanceReport
    ha: list[ClusterHaSettings]
    ha_unknown: list[str]
    unrestartable: list[UnrestartableVm]
    ok: bool
    other_installs_unrestartable: list[str] = msgspec.field(default_factory=list)
    vcenter: str = ""


class Location(_Report, frozen=True):
    """Where a node's VM runs, from the topology KV; only `node` is set when the KV has no
    placement for it (or, for a pod, when the pod is on no node: all empty). `vcenter` is set
    when the topology spans several vCenters (names and moids repeat across them)."""

    node: str
    vm_moid: str = ""
    esxi_host: str = ""
    host_label: str = ""
    cluster: str = ""
    datacenter: str = ""
    vcenter: str = ""


class TermView(_Report, frozen=True):
    """A pod (anti-)affinity term that concerns a pod: its own (`owner` is the pod) or an existing
    pod's required anti-affinity that selects it (`owner` is that pod).

    `kind` is "required affinity", "required anti-affinity", "preferred affinity" or "preferred
    anti-affinity"; `rule` the term in words; `host_level`: its domain is the ESXi host. `state`
    is whether it holds where the pod runs now ("unknown": the node's host is not known,
    "not-placed": the pod is on no node); `why` says so in the affinity engine's words.
    """

    owner: str
    kind: str
    rule: str
    host_level: bool
    state: TermState
    why: str = ""


class Refusal(_Report, frozen=True):
    """Nodes refusing a pod for one reason, grouped by ESXi host label ("" when the host is
    unknown); `plugin`, `reason` and `message` are the affinity engine's (kube-scheduler's
    plugin and reason, the rule and the pod in words). Nodes sorted."""

    host: str
    nodes: list[str]
    plugin: str
    reason: str
    message: str


class DrsRuleView(_Report, frozen=True):
    """A DRS rule or group the drs-translator holds an ownership record of for the pod;
    `held_because` says why it is disabled for now (a host's maintenance), empty when enforced."""

    name: str
    kind: str
    cluster_moid: str
    state: str
    vms: list[str]
    reason: str = ""
    applied_at: str = ""
    held_because: str = ""


class HistoryEntry(_Report, frozen=True):
    """One thing hostaffinity did, from the event stream: `at` is the event's `occurred_at`,
    `type` its type, `summary` what it says, in words."""

    at: str
    type: str
    source: str
    summary: str


class SpreadDomain(_Report, frozen=True):
    """One topology domain of a spread: how many pods the spread matches there and the skew
    over the global minimum (for a pod on no node, the skew placing it there would make);
    `refused`: a DoNotSchedule spread refuses the domain to the pod."""

    domain: str
    matching: int
    skew: int
    refused: bool = False


class SpreadView(_Report, frozen=True):
    """One of a pod's topology spread constraints (its own, or the scheduler's defaults) and
    how it stands: `domains` eligible domains, `global_min` the fewest matching pods in one,
    `per_domain` the fullest domains (at most 20, most matching first)."""

    rule: str
    host_level: bool
    when_unsatisfiable: str
    max_skew: int
    state: TermState
    global_min: int
    domains: int
    per_domain: list[SpreadDomain]
    why: str = ""


class PlacementChange(_Report, frozen=True):
    """One placement field of a VirtualMachine (`affinity`, `nodeSelector`): what its template
    asks and what its running VMI has, each as compact JSON (`null`: not set)."""

    field: str
    template: str
    running: str


class VmRestartView(_Report, frozen=True):
    """A virt-launcher pod's VirtualMachine whose template's placement its running VMI does not
    have yet, KubeVirt holding the change for the VM's next start (RestartRequired)."""

    vm: str
    changes: list[PlacementChange]


class PodExplanation(_Report, frozen=True):
    """`hostaffinity explain pod NAMESPACE/NAME -o json`.

    `concerned` is false when no hostaffinity rule, DRS record or event concerns the pod.
    `terms`: the pod's own terms in the order written (required, then preferred), then existing
    pods' required anti-affinity terms selecting it. For a pod on no node, `feasible_nodes`
    (sorted) and `refusals` (by host, then reason) are the engine's filter now and `summary`
    kube-scheduler's one-line summary of it. `history` is oldest first. `spreads`: its topology
    spread constraints, each with the matching pods and skew per domain. `host_headroom`: one
    sentence per required host-level anti-affinity rule whose selected pods (this one included)
    fill every ESXi host the pod may use, so that one more replica -- a rollout's surge pod --
    has nowhere to go. `ha_failover`: one sentence per DRS anti-affinity rule of the pod's that
    leaves a node VM unrestartable by vSphere HA after one host failure. `vm_restart`: for a
    virt-launcher pod, its VirtualMachine's placement that waits for a restart, if any.
    `drs_not_held`: one sentence per DRS rule or group asked for the pod that vCenter does not
    hold, and why. `shared_hosts`: one sentence per rule of another install, in a vSphere
    cluster holding the pod's VMs or rules, that keeps a host from maintenance or leaves no
    failover room.
    """

    pod: str
    phase: str
    concerned: bool
    location: Location
    terms: list[TermView]
    feasible_nodes: list[str]
    refusals: list[Refusal]
    summary: str
    drs_rules: list[DrsRuleView]
    history: list[HistoryEntry]
    spreads: list[SpreadView] = msgspec.field(default_factory=list)
    host_headroom: list[str] = msgspec.field(default_factory=list)
    ha_failover: list[str] = msgspec.field(default_factory=list)
    vm_restart: VmRestartView | None = None
    drs_not_held: list[str] = msgspec.field(default_factory=list)
    shared_hosts: list[str] = msgspec.field(default_factory=list)


class NodeExplanation(_Report, frozen=True):
    """`hostaffinity explain node NAME -o json`: where the node's VM runs, the host's state, the
    other nodes on its host (sorted), the host-level terms concerning its pods (by pod), and what
    hostaffinity did about the node, oldest first."""

    node: str
    location: Location
    host_state: str
    in_maintenance_mode: bool
    cordoned: bool
    host_peers: list[str]
    terms: list[TermView]
    history: list[HistoryEntry]


class ServiceView(_Report, frozen=True):
    """One service: its leader from the Lease (`lease` is empty for the scheduler-extender,
    which every replica runs), and the last event it published.

    `live` is false when the Lease is missing, has no holder, or was not renewed within its
    duration; `held_seconds` counts from `acquired_at` to the moment of the report.
    `readiness` is the live leader's /readyz as it wrote it on its Lease ("ready", "degraded":
    ready with a vCenter of several away, or "not ready"; "" when not known), and
    `readiness_parts` each part that does not pass, in /readyz's order.
    """

    service: str
    lease: str
    holder: str
    live: bool
    acquired_at: str = ""
    renewed_at: str = ""
    held_seconds: float = 0.0
    last_event_type: str = ""
    last_event_at: str = ""
    readiness: str = ""
    readiness_parts: list[ReadinessPart] = msgspec.field(default_factory=list)


class StreamView(_Report, frozen=True):
    """A JetStream stream (an events stream or a KV bucket's): `replicas` configured, the
    current stream `leader` ("" on a single server), and each replica that is not current with
    its lag in operations (`lagging`, sorted)."""

    name: str
    messages: int
    replicas: int
    leader: str
    lagging: dict[str, int]


class StatusReport(_Report, frozen=True):
    """`hostaffinity status -o json`. `problems` names what needs attention, one sentence each
    (a service with no live leader, a part of a leader's readiness that does not pass (a vCenter
    of several away: degraded), dead letters, a replica not current, exposed workloads, rules
    with no host to spare); the command exits 1 when it is not empty. `at` is when the report was
    made. `no_host_to_spare`: per required host-level anti-affinity rule whose replicas fill every
    usable ESXi host, `namespace/pod: sentence` for one of its pods (a rollout would deadlock).
    `ha_unrestartable`: per DRS anti-affinity rule of ours that leaves a node VM unrestartable by
    vSphere HA after one host failure, one sentence (by rule name).
    `held_rules`: `rule in cluster: why` for each DRS rule the drs-translator holds (disabled) so
    that a host can enter maintenance mode (the cluster `<vcenter>/<moid>` when the rules span
    several vCenters); expected while a host is patched, not a problem.
    `cluster`: the identity of the Kubernetes cluster this install serves, as its services stamp
    it on their events. `drs_not_held`: one sentence per DRS rule or group this install wants
    that vCenter does not hold (a problem each). `shared_hosts`: one sentence per rule of another
    install on the same vSphere cluster that keeps a host from maintenance or leaves no failover
    room (a problem each)."""

    at: str
    services: list[ServiceView]
    exposed_workloads: int
    dlq_depth: int
    streams: list[StreamView]
    problems: list[str]
    no_host_to_spare: list[str] = msgspec.field(default_factory=list)
    ha_unrestartable: list[str] = msgspec.field(default_factory=list)
    held_rules: list[str] = msgspec.field(default_factory=list)
    cluster: str = ""
    drs_not_held: list[str] = msgspec.field(default_factory=list)
    shared_hosts: list[str] = msgspec.field(default_factory=list)
