"""Events on the `HOSTAFFINITY_EVENTS` stream: a tagged union decoded by one decoder."""

import hashlib
from typing import Final, get_args

import msgspec

from hostaffinity.schema.version import SCHEMA_VERSION


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Fields every event carries. `id` is deterministic and doubles as `Nats-Msg-Id`.

    `cluster` is the identity of the Kubernetes cluster whose install published it (the bus
    stamps it on publish; empty in events of releases before 0.2.0): many clusters' installs may
    share one vCenter, and a fleet's subscribers read several installs' events.
    """

    id: str
    schema_version: int = SCHEMA_VERSION
    occurred_at: str
    source: str
    cluster: str = ""


class VmMoved(Event, frozen=True, kw_only=True, tag="vm.moved"):
    """A node's VM now runs on another ESXi host (vMotion, manual or by DRS); the node events
    name the vCenter the VM is in (`vcenter`, as placements name it)."""

    node: str
    vm_moid: str
    from_host_moid: str
    from_host_name: str
    to_host_moid: str
    to_host_name: str
    version: int
    vcenter: str = ""


class NodePlaced(Event, frozen=True, kw_only=True, tag="node.placed"):
    """A node was matched to its VM for the first time (a node joined, or a restart found it)."""

    node: str
    vm_moid: str
    host_moid: str
    host_name: str
    cluster_name: str
    datacenter: str
    matched_by: str
    version: int
    vcenter: str = ""


class NodeLabelled(Event, frozen=True, kw_only=True, tag="node.labelled"):
    """The node's labels were patched to match its placement."""

    node: str
    labels: dict[str, str]
    version: int
    vcenter: str = ""


class NodeUnmatched(Event, frozen=True, kw_only=True, tag="node.unmatched"):
    """A node could not be matched to exactly one VM; `reason` says why in words.

    `candidates` are the VMs that matched equally (moids), `candidate_vcenters` the vCenter of
    each, in the same order: one BIOS UUID in two vCenters is reported, never guessed.
    """

    node: str
    reason: str
    candidates: list[str] = []
    candidate_vcenters: list[str] = []


class ExtenderDecision(Event, frozen=True, kw_only=True, tag="extender.decision"):
    """What the scheduler-extender answered kube-scheduler for one pod (a sample, not all).

    `verb` is filter, prioritize or bind; `outcome` one of feasible, unschedulable, scored,
    bound, error. `rejections` counts the failed nodes per reason; `node` is the bind target or
    the best-scored node.
    """

    verb: str
    pod: str
    pod_uid: str
    outcome: str
    nodes_asked: int = 0
    nodes_passed: int = 0
    node: str = ""
    rejections: dict[str, int] = {}
    message: str = ""


class DrsRulesApplied(Event, frozen=True, kw_only=True, tag="drs.rules.applied"):
    """The drs-translator changed one vSphere cluster's DRS rules and groups in one reconfigure.

    The lists hold rule or group names; with `dry_run` nothing was written, this is the plan.
    `renamed` maps an old name to its new one where the batch renames objects an earlier
    release named without the install's identity (the new names are also in `added` or
    `edited`, the old ones in `removed` for groups).
    """

    vcenter: str
    cluster_moid: str
    added: list[str] = []
    edited: list[str] = []
    removed: list[str] = []
    dry_run: bool = False
    renamed: dict[str, str] = {}


class DrsRuleConflict(Event, frozen=True, kw_only=True, tag="drs.rule.conflict"):
    """A DRS rule was not sent, or a rule we found is not ours to touch.

    `reason`: `too-few-hosts` (an anti-affinity group larger than the cluster's usable hosts),
    `together-and-apart` (one VM pair both kept together and apart), `no-common-host` (one VM
    sent by "must" VM-Host rules onto host sets with no host in common), `not-translatable` (a term
    DRS cannot express exactly), `prefix-without-record` (a rule with our prefix that we have no
    record of: reported, never touched), `refused` (vCenter rejected it; retried with backoff).
    """

    vcenter: str
    cluster_moid: str
    name: str
    reason: str
    message: str
    vms: list[str] = []
    pods: list[str] = []


class DrsRuleDrift(Event, frozen=True, kw_only=True, tag="drs.rule.drift"):
    """A DRS rule or group of ours was changed or deleted outside hostaffinity, and was repaired.

    `change` is `deleted` or `edited`; `found_vms` is what vCenter held (empty when deleted).
    """

    vcenter: str
    cluster_moid: str
    name: str
    change: str
    expected_vms: list[str] = []
    found_vms: list[str] = []


class DrsRuleHeld(Event, frozen=True, kw_only=True, tag="drs.rule.held"):
    """A DRS rule of ours was held (disabled in vCenter, its record kept) because it would keep
    DRS from evacuating a host entering maintenance mode, or was restored (enabled again) once
    the hosts had room for its VMs again.

    `reason` is `host-maintenance`; `hosts` are the moids of the hosts entering or in maintenance
    mode that the rule could not do without; `restored` is false when held, true when restored.
    """

    vcenter: str
    cluster_moid: str
    name: str
    reason: str
    message: str
    restored: bool = False
    hosts: list[str] = []
    vms: list[str] = []
    pods: list[str] = []


class PodMutated(Event, frozen=True, kw_only=True, tag="pod.mutated"):
    """What the admission webhook changed in a pod at creation (a sample, not all).

    Pods made from a template have no name at admission: `pod` is namespace/generateName
    (or the name when set) and `request_uid` the admission request's uid. `twins` counts the
    hostname anti-affinity terms given (required) or moved to (preferred) the ESXi-host key;
    `host_label_required` and `spread_added` say what else the patch added; `spreads_moved`
    counts the hostname topology spread constraints moved to the ESXi-host key.
    """

    pod: str
    request_uid: str
    owner: str = ""
    twins: int = 0
    host_label_required: bool = False
    spread_added: bool = False
    warnings: list[str] = []
    spreads_moved: int = 0


class PodEvicted(Event, frozen=True, kw_only=True, tag="pod.evicted"):
    """The descheduler asked the Eviction API to evict a pod, and what came of it.

    `strategy` is the plugin that found the violation and `rule` the violated rule in words.
    `result` is `requested` for the intent stored before each attempt's Eviction call, then what
    came of that attempt: evicted, blocked (a PodDisruptionBudget said no: retried later), gone
    (the pod was no longer there), error, unreachable (the API server did not answer), or
    withdrawn (the next leader found the attempt of a stopped descheduler not carried out); a
    dry run says dry-run alone. A `requested` and its answer share `pod_uid`; an eviction made has
    the id of `evicted` and the pod's uid, whoever announces it.
    """

    pod: str
    pod_uid: str
    node: str
    strategy: str
    rule: str
    result: str
    owner: str = ""


class VmiMigrationRequested(Event, frozen=True, kw_only=True, tag="vmi.migration.requested"):
    """The descheduler created a VirtualMachineInstanceMigration instead of evicting a
    virt-launcher pod, so the VM moves live rather than being restarted.

    `result` is migrated or dry-run (empty from releases before 0.2.0), or, as in `pod.evicted`,
    requested (the intent stored before the migration is created) and the other answers to it;
    `owner` the workload whose cooldown it started, as in `pod.evicted`; `pod_uid` the
    virt-launcher pod's (empty from releases before 0.2.0)."""

    vmi: str
    migration: str
    node: str
    strategy: str
    rule: str
    pod: str = ""
    result: str = ""
    owner: str = ""
    pod_uid: str = ""


TopologyEvent = (
    VmMoved
    | NodePlaced
    | NodeLabelled
    | NodeUnmatched
    | ExtenderDecision
    | DrsRulesApplied
    | DrsRuleConflict
    | DrsRuleDrift
    | DrsRuleHeld
    | PodMutated
    | PodEvicted
    | VmiMigrationRequested
)


def event_type_of(message: type[Event]) -> str:
    """The `type` tag a message class is encoded with (its subject suffix)."""
    return str(message.__struct_config__.tag)


# Derived from the union, so a new event is one class plus its place in `TopologyEvent`.
EVENT_MESSAGES: Final[tuple[type[Event], ...]] = get_args(TopologyEvent)
EVENT_TYPES: Final[tuple[str, ...]] = tuple(event_type_of(message) for message in EVENT_MESSAGES)

# What decoding untrusted JSON bytes raises: msgspec's errors (ValidationError included), invalid
# UTF-8 inside a string, nesting deeper than the interpreter allows. All mean "bad input".
UNDECODABLE: Final = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[TopologyEvent] = msgspec.json.Decoder(TopologyEvent)


def encode_event(event: Event) -> bytes:
    """JSON bytes of an event, with its `type` tag."""
    return _encoder.encode(event)


def decode_event(data: bytes) -> TopologyEvent:
    """Decode any known event; raises one of UNDECODABLE on bad input."""
    return _decoder.decode(data)


def event_id(event_type: str, *parts: object) -> str:
    """A deterministic id: the same fact always gets the same id, so JetStream drops repeats."""
    text = "\x1f".join([event_type, *(str(p) for p in parts)])
    return f"{event_type}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:24]}"
