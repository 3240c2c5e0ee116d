"""What to do for one topology key: compare vCenter with the KV and the node's labels.

Pure functions of (node, every vCenter's inventory, previous placement) and of (host, its
vCenter's inventory, previous host record); the service applies the actions they return in
order: KV first, then the label patch, then events, so a reader of the KV is never behind the
labels and an event always describes a state that is already stored. `stale_keys` is the
resync's comparison of the KV as it is with what the labeller last wrote there.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import msgspec

from hostaffinity.node_labeller.config import FailureDomainSettings
from hostaffinity.node_labeller.core.failure_domains import (
    FailureDomains,
    TagIndex,
    host_failure_domains,
    plan_shared_labels,
)
from hostaffinity.node_labeller.core.inventory import HostFacts, Inventory, VmFacts
from hostaffinity.node_labeller.core.matching import Fallback, Matched, Unmatched, match_node
from hostaffinity.node_labeller.core.nodes import Node
from hostaffinity.schema import (
    ANNOTATION_ESXI_HOST_NAME,
    ANNOTATION_FAILURE_DOMAIN_LABELS,
    ANNOTATION_VM,
    LABEL_DATACENTER,
    LABEL_ESXI_HOST,
    LABEL_LEGACY_HOST,
    LABEL_RACK,
    LABEL_REGION,
    LABEL_VSPHERE_CLUSTER,
    LABEL_ZONE,
    EsxiHost,
    Event,
    EventFactory,
    NodeLabelled,
    NodePlaced,
    NodePlacement,
    NodeUnmatched,
    TopologySnapshot,
    VmMoved,
    host_key,
    label_value,
    node_key,
)


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """What the planner reads from the config: how to match a node without a UUID, whether to
    keep the archived plugin's label, which tag categories give failure domains."""

    fallback: Fallback = "vm-name"
    legacy_host_label: bool = True
    failure_domains: FailureDomainSettings = field(default_factory=FailureDomainSettings)


@dataclass(frozen=True, slots=True)
class Tags:
    """vCenter's tags (and rack host groups) as last read; None while unread (or unreadable):
    the failure-domain labels are then left as they are, never removed for want of a read."""

    index: TagIndex | None = None
    # host moid -> the racks its DRS host groups name (with `rack_host_group_prefix`)
    group_racks: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def domains(
        self, host: str, inventory: Inventory, settings: PlannerSettings
    ) -> FailureDomains | None:
        """The host's domains; None when they cannot be known now."""
        if not settings.failure_domains.enabled:
            return FailureDomains()
        if self.index is None:
            return None
        return host_failure_domains(
            host,
            inventory,
            self.index,
            settings.failure_domains,
            self.group_racks.get(host, ()),
        )


NO_TAGS = Tags()
EMPTY_TAGS: Mapping[str, Tags] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeWarning:
    """A Kubernetes Event to put on the node: something an operator should look at."""

    reason: str
    message: str


@dataclass(slots=True)
class NodeActions:
    """Everything to do for one node, in the order it must be done."""

    node: str
    placement: NodePlacement | None = None
    delete_placement: bool = False
    label_patch: dict[str, dict[str, str | None]] | None = None
    events: list[Event] = field(default_factory=list)
    warnings: list[NodeWarning] = field(default_factory=list)

    def writes(self) -> bool:
        """Whether anything is to be written: the KV, the labels or the bus."""
        return bool(
            self.placement is not None
            or self.delete_placement
            or self.label_patch is not None
            or self.events
        )


@dataclass(frozen=True, slots=True)
class HostActions:
    """The KV write for one ESXi host record: a new value, a delete, or nothing."""

    put: EsxiHost | None = None
    delete: bool = False


def owned_label_keys(settings: PlannerSettings) -> tuple[str, ...]:
    keys = (LABEL_ESXI_HOST, LABEL_VSPHERE_CLUSTER, LABEL_DATACENTER, LABEL_RACK)
    return (*keys, LABEL_LEGACY_HOST) if settings.legacy_host_label else keys


def reconcile_node(
    node: Node,
    inventories: Mapping[str, Inventory],
    previous: NodePlacement | None,
    settings: PlannerSettings,
    *,
    now: str,
    version: int,
    events: EventFactory,
    kv_stale: bool = False,
    tags: Mapping[str, Tags] = EMPTY_TAGS,
) -> NodeActions:
    """Decide the KV write, label patch, events and warnings that bring `node` up to date.

    `inventories` holds every vCenter's, by name; the node's VM is looked for in all of them.
    `version` is the number the new placement gets if it differs from `previous`. `kv_stale`
    says the KV holds something other than `previous` (garbage, a false placement, nothing): the
    key is then rewritten, or deleted, even where `previous` is still true; that repair is no
    change of placement, so it announces nothing. `tags` (by vCenter) gives the host's failure
    domains; `events` builds the events announced.
    """
    actions = NodeActions(node=node.name)
    match = match_node(node, inventories, settings.fallback)
    inventory = inventories[match.vcenter] if isinstance(match, Matched) else None
    host = _host_of(match, inventory, actions)
    if not isinstance(match, Matched) or inventory is None or host is None:
        removes = previous is not None or kv_stale
        _unplace(node, match, actions, settings, events, now=now, removes=removes)
        return actions
    vm = inventory.vm(match.vm_moid)
    assert vm is not None  # match_node only returns VMs the inventory holds
    # Each vCenter's tags are its own (host moids repeat across vCenters).
    domains = tags.get(match.vcenter, NO_TAGS).domains(host.moid, inventory, settings)
    # Unknown domains keep what was stored for the same host, so an unreadable tag API rewrites
    # nothing; a VM that moved meanwhile has none known.
    same_host = (
        previous is not None
        and previous.host_moid == host.moid
        and previous.vcenter == match.vcenter
    )
    kept = domains if domains is not None else _stored_domains(previous if same_host else None)
    observed = _placement(node, vm, host, match.vcenter, kept, now=now, version=version)
    placement = _settle(previous, observed, match, actions, events, now=now, kv_stale=kv_stale)
    actions.warnings.extend(_placement_warnings(host, vm, placement))
    actions.warnings.extend(
        NodeWarning("FailureDomainAmbiguous", f"{why}; label left unset")
        for why in (domains.ambiguities if domains else ())
    )
    known = domains is not None
    _relabel(node, placement, actions, settings, events, now=now, domains_known=known)
    return actions


def _unplace(
    node: Node,
    match: Matched | Unmatched,
    actions: NodeActions,
    settings: PlannerSettings,
    events: EventFactory,
    *,
    now: str,
    removes: bool,
) -> None:
    """No host for the node: say why when unmatched, drop its KV key and our labels."""
    if isinstance(match, Unmatched):
        actions.warnings.append(NodeWarning("NodeUnmatched", match.reason))
        actions.events.append(_unmatched_event(events, node.name, match, now))
    actions.delete_placement = removes
    actions.label_patch = _patch(node, {}, settings, actions, domains_known=True)


def _placement(
    node: Node,
    vm: VmFacts,
    host: HostFacts,
    vcenter: str,
    domains: FailureDomains,
    *,
    now: str,
    version: int,
) -> NodePlacement:
    """Where vCenter says the node's VM runs now, as the KV value it would get."""
    return NodePlacement(
        node=node.name,
        vm_moid=vm.moid,
        bios_uuid=vm.bios_uuid,
        instance_uuid=vm.instance_uuid,
        host_moid=host.moid,
        host_name=host.name,
        host_label=label_value(host.name),
        cluster_moid=host.cluster_moid,
        cluster_name=host.cluster_name,
        datacenter=host.datacenter,
        vcenter=vcenter,
        observed_at=now,
        version=version,
        zone=domains.zone,
        region=domains.region,
        rack=domains.rack,
        vcenter_uuid=host.vcenter_uuid,
    )


def _settle(
    previous: NodePlacement | None,
    observed: NodePlacement,
    match: Matched,
    actions: NodeActions,
    events: EventFactory,
    *,
    now: str,
    kv_stale: bool,
) -> NodePlacement:
    """The placement that stands: the previous one when the node has not moved (rewritten only
    to repair a stale KV, silently), else the observed one, written and announced."""
    if previous is None or not _same_place(previous, observed):
        actions.placement = observed
        actions.events.extend(_placement_events(events, previous, observed, match, now))
        return observed
    # A placement recorded before the vCenter's instance UUID was read gets it, silently too.
    if kv_stale or previous.vcenter_uuid != observed.vcenter_uuid:
        actions.placement = msgspec.structs.replace(
            previous, observed_at=now, version=observed.version, vcenter_uuid=observed.vcenter_uuid
        )
        return actions.placement
    return previous


def _placement_warnings(
    host: HostFacts, vm: VmFacts, placement: NodePlacement
) -> list[NodeWarning]:
    """What an operator should know about where the node is: a host in maintenance, a host
    name that had to be changed to become a label value."""
    warnings = []
    if host.in_maintenance_mode:
        warnings.append(
            NodeWarning(
                "EsxiHostInMaintenance",
                f"ESXi host {host.name} is in maintenance mode; this node's VM {vm.name} "
                "is expected to move",
            )
        )
    if placement.host_label != placement.host_name:
        warnings.append(
            NodeWarning(
                "EsxiHostNameNotALabelValue",
                f"ESXi host name {placement.host_name!r} is not a valid label value; labelled "
                f"{placement.host_label!r}, full name in annotation {ANNOTATION_ESXI_HOST_NAME}",
            )
        )
    return warnings


def _relabel(
    node: Node,
    placement: NodePlacement,
    actions: NodeActions,
    settings: PlannerSettings,
    events: EventFactory,
    *,
    now: str,
    domains_known: bool,
) -> None:
    """Patch the node's labels to the placement, announcing the labels when they change."""
    desired = desired_labels(placement, settings)
    actions.label_patch = _patch(node, desired, settings, actions, domains_known=domains_known)
    if actions.label_patch is None:
        return
    patched = actions.label_patch.get("labels", {})
    labels = {
        k: v
        for k, v in desired.items()
        if k in owned_label_keys(settings)
        or (k in _shared_keys(settings) and patched.get(k, node.metadata.labels.get(k)) == v)
    }
    actions.events.append(
        events.new(
            NodeLabelled,
            node.name,
            placement.version,
            sorted(labels.items()),
            occurred_at=now,
            node=node.name,
            labels=labels,
            version=placement.version,
            vcenter=placement.vcenter,
        )
    )


def forget_node(name: str, previous: NodePlacement | None, *, kv_stale: bool) -> NodeActions:
    """A node Kubernetes no longer has: its KV key goes (its labels went with the Node)."""
    return NodeActions(node=name, delete_placement=previous is not None or kv_stale)


def reconcile_host(
    moid: str,
    vcenter: str,
    inventory: Inventory | None,
    previous: EsxiHost | None,
    *,
    kv_stale: bool,
    domains: FailureDomains | None = None,
) -> HostActions:
    """The record of host `moid` of `vcenter` its inventory calls for (None: a vCenter no
    longer configured), compared with `previous`; `domains` are its failure domains (None: not
    known now, those of `previous` stay)."""
    domains = domains if domains is not None else _stored_domains(previous)
    facts = inventory.host(moid) if inventory is not None else None
    if facts is None:
        return HostActions(delete=previous is not None or kv_stale)
    host = EsxiHost(
        moid=moid,
        name=facts.name,
        label=label_value(facts.name),
        cluster_moid=facts.cluster_moid,
        cluster_name=facts.cluster_name,
        datacenter=facts.datacenter,
        connection_state=facts.connection_state,
        in_maintenance_mode=facts.in_maintenance_mode,
        zone=domains.zone,
        region=domains.region,
        rack=domains.rack,
        entering_maintenance=facts.entering_maintenance,
        vcenter=vcenter,
        vcenter_uuid=facts.vcenter_uuid,
    )
    return HostActions(put=host) if kv_stale or host != previous else HostActions()


def stale_keys(
    stored: TopologySnapshot,
    placements: Mapping[str, NodePlacement],
    hosts: Mapping[str, EsxiHost],
) -> set[str]:
    """KV keys whose value is not what the labeller last wrote: garbage or wrong-typed values,
    false placements, keys it never wrote or deleted, keys it wrote that are gone."""
    stale = {
        node_key(node)
        for node in stored.nodes.keys() | placements.keys()
        if stored.nodes.get(node) != placements.get(node)
    }
    stale.update(
        host_key(moid)
        for moid in stored.hosts.keys() | hosts.keys()
        if stored.hosts.get(moid) != hosts.get(moid)
    )
    return stale


def desired_labels(placement: NodePlacement, settings: PlannerSettings) -> dict[str, str]:
    """Our labels and annotations for a placed node (one map; keys never collide)."""
    desired = {
        LABEL_ESXI_HOST: placement.host_label,
        LABEL_VSPHERE_CLUSTER: label_value(placement.cluster_name),
        LABEL_DATACENTER: label_value(placement.datacenter),
        ANNOTATION_VM: placement.vm_moid,
    }
    if settings.legacy_host_label:
        desired[LABEL_LEGACY_HOST] = placement.host_label
    for key, value in ((LABEL_ZONE, placement.zone), (LABEL_REGION, placement.region)):
        if value:
            desired[key] = value
    if placement.rack:
        desired[LABEL_RACK] = placement.rack
    if placement.host_label != placement.host_name:
        desired[ANNOTATION_ESXI_HOST_NAME] = placement.host_name
    return desired


def _host_of(
    match: Matched | Unmatched, inventory: Inventory | None, actions: NodeActions
) -> HostFacts | None:
    if isinstance(match, Unmatched) or inventory is None:
        return None
    vm = inventory.vm(match.vm_moid)
    host = inventory.host(vm.host_moid) if vm is not None and vm.host_moid else None
    if host is None:
        name = vm.name if vm is not None else match.vm_moid
        actions.warnings.append(
            NodeWarning("VmHasNoHost", f"VM {name} has no ESXi host in vCenter; labels removed")
        )
    return host


def _same_place(a: NodePlacement, b: NodePlacement) -> bool:
    """Equal placements apart from when they were observed and their version."""
    return (a.vm_moid, a.host_moid, a.host_name, a.cluster_moid, a.cluster_name, a.datacenter) == (
        b.vm_moid,
        b.host_moid,
        b.host_name,
        b.cluster_moid,
        b.cluster_name,
        b.datacenter,
    ) and (a.bios_uuid, a.instance_uuid, a.vcenter, a.zone, a.region, a.rack) == (
        b.bios_uuid,
        b.instance_uuid,
        b.vcenter,
        b.zone,
        b.region,
        b.rack,
    )


def _placement_events(
    events: EventFactory,
    previous: NodePlacement | None,
    placement: NodePlacement,
    match: Matched,
    now: str,
) -> list[Event]:
    node, vm, version = placement.node, placement.vm_moid, placement.version
    # What both events say of the placement.
    said = {"node": node, "vm_moid": vm, "version": version, "vcenter": placement.vcenter}
    if previous is None or previous.vm_moid != vm:
        return [
            events.new(
                NodePlaced,
                node,
                vm,
                version,
                occurred_at=now,
                host_moid=placement.host_moid,
                host_name=placement.host_name,
                cluster_name=placement.cluster_name,
                datacenter=placement.datacenter,
                matched_by=match.matched_by,
                **said,
            )
        ]
    if previous.host_moid != placement.host_moid:
        return [
            events.new(
                VmMoved,
                node,
                vm,
                previous.host_moid,
                placement.host_moid,
                version,
                occurred_at=now,
                from_host_moid=previous.host_moid,
                from_host_name=previous.host_name,
                to_host_moid=placement.host_moid,
                to_host_name=placement.host_name,
                **said,
            )
        ]
    return []


def _unmatched_event(events: EventFactory, node: str, match: Unmatched, now: str) -> NodeUnmatched:
    return events.new(
        NodeUnmatched,
        node,
        match.reason,
        occurred_at=now,
        node=node,
        reason=match.reason,
        candidates=[moid for _, moid in match.candidates],
        candidate_vcenters=[vcenter for vcenter, _ in match.candidates],
    )


def _patch(
    node: Node,
    desired: dict[str, str],
    settings: PlannerSettings,
    actions: NodeActions,
    *,
    domains_known: bool,
) -> dict[str, dict[str, str | None]] | None:
    """A merge patch naming only our keys (null removes one), or None when nothing differs.
    Failure-domain labels are left alone while the domains are unknown; a zone or region that
    someone else set to another value is reported on the node, not overwritten."""
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}
    for key in owned_label_keys(settings):
        if key == LABEL_RACK and not domains_known:
            continue
        if node.metadata.labels.get(key) != desired.get(key):
            labels[key] = desired.get(key)
    for key in (ANNOTATION_VM, ANNOTATION_ESXI_HOST_NAME):
        if node.metadata.annotations.get(key) != desired.get(key):
            annotations[key] = desired.get(key)
    if domains_known:
        shared = plan_shared_labels(
            node.metadata.labels, node.metadata.annotations, desired, _shared_keys(settings)
        )
        labels.update(shared.labels)
        if shared.owned_annotation is not None:
            annotations[ANNOTATION_FAILURE_DOMAIN_LABELS] = shared.owned_annotation or None
        actions.warnings.extend(
            NodeWarning(
                "FailureDomainConflict",
                f"label {c.key}={c.node_value} was set by someone else (the vSphere cloud "
                f"provider?) but vCenter's tags give {c.tagged_value}; left as is",
            )
            for c in shared.conflicts
        )
    patch: dict[str, dict[str, str | None]] = {}
    if labels:
        patch["labels"] = labels
    if annotations:
        patch["annotations"] = annotations
    return patch or None


def _shared_keys(settings: PlannerSettings) -> tuple[str, ...]:
    """The well-known failure-domain keys the labeller manages: those with a category."""
    domains = settings.failure_domains
    return tuple(
        key
        for key, category in (
            (LABEL_ZONE, domains.zone_category),
            (LABEL_REGION, domains.region_category),
        )
        if category
    )


def _stored_domains(stored: NodePlacement | EsxiHost | None) -> FailureDomains:
    if stored is None:
        return FailureDomains()
    return FailureDomains(zone=stored.zone, region=stored.region, rack=stored.rack)
