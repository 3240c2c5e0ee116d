"""What DRS should hold for the fleet groups in one vCenter: one VM-VM anti-affinity rule per
group and vSphere cluster over the node VMs that hold the group's members, of every install.
Pure, like planner.py: pods, topology and the fleet view in, a plan out; fleet_rules.py decides
whether this install may write it (its lease) and does.

- This install's members are its placed pods with the `hostaffinity.io/fleet-group` label, on
  their node's VM (the topology KV). Another install's members come from the fleet view: a
  member counts in a vSphere cluster of this vCenter when its host is one of that cluster's
  hosts (by label value, and by moid where its `host_id` carries one) and it names its VM.
- A rule needs two VMs: with fewer, none is wanted (and its holder removes one that exists).
- Its VMs are counted against the cluster's hosts as planner.py counts the install's own rules:
  more VMs than connected hosts is a conflict (`too-few-hosts`) and the rule is *held*, neither
  sent nor taken away; more than the hosts left by those in or entering maintenance sends it
  disabled, `held_because` saying why, so DRS can evacuate the hosts.
- A plan is made for each group and cluster where this install has a member, and for each fleet
  rule it holds a record of (it may have to hand that one over or remove it): the record's group
  is found among the groups known here; a rule whose group no install has any more is planned
  empty, so that its holder removes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from hostaffinity.affinity.fleet_groups import FleetMember, FleetMembers, fleet_group
from hostaffinity.affinity.index import PodRecord
from hostaffinity.drs_translator.core.plan import ClusterHosts, Conflict
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.schema import EsxiHost, NodePlacement, fleet_rule_name

FLEET_REASON = "fleet group"


@dataclass(frozen=True, slots=True)
class FleetRulePlan:
    """One fleet rule of a vSphere cluster: `rule` is what DRS should hold (None: no rule),
    `own` whether this install has a member there, `conflict` set when the rule is held (left
    as vCenter has it)."""

    cluster_moid: str
    name: str
    group: str
    rule: DrsObject | None
    own: bool
    conflict: Conflict | None = None
    # Hosts in or entering maintenance the rule is sent disabled for.
    maintenance_hosts: tuple[str, ...] = ()


@dataclass(slots=True)
class _Members:
    """The VMs of one group in one cluster, with who is on each."""

    own: dict[str, set[str]] = field(default_factory=dict)
    others: dict[str, set[str]] = field(default_factory=dict)

    def vms(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.own) | set(self.others)))

    def pods(self) -> tuple[str, ...]:
        found = set().union(*self.own.values(), *self.others.values())
        return tuple(sorted(found))


def plan_fleet_rules(
    own: Iterable[PodRecord],
    placements: Mapping[str, NodePlacement],
    hosts: Mapping[str, EsxiHost],
    fleet: FleetMembers,
    vcenter: str,
    recorded: Mapping[str, Collection[str]] | None = None,
) -> list[FleetRulePlan]:
    """The fleet rules of `vcenter` this install has a say in (see the module's docstring);
    `own` are this install's placed members, `recorded` the fleet rules it holds records of, by
    cluster."""
    ours = {h.moid: h for h in hosts.values() if h.vcenter == vcenter}
    members: dict[tuple[str, str], _Members] = {}
    for record in own:
        group = fleet_group(record.labels)
        placed = placements.get(record.node)
        if group is None or placed is None or placed.vcenter != vcenter or not placed.cluster_moid:
            continue
        found = members.setdefault((placed.cluster_moid, group), _Members())
        found.own.setdefault(placed.vm_moid, set()).add(record.key)
    named: dict[tuple[str, str], str] = {}
    groups = {group for _, group in members} | set(fleet.groups())
    for cluster, names in (recorded or {}).items():
        for group in groups:
            name = fleet_rule_name(cluster, group)
            if name in names:
                named[(cluster, name)] = group
        for name in names:
            named.setdefault((cluster, name), "")
    for cluster, group in [*members, *((c, g) for (c, _), g in named.items() if g)]:
        found = members.setdefault((cluster, group), _Members())
        for member in _in_cluster(fleet.of(group), cluster, ours):
            found.others.setdefault(member.vm_moid, set()).add(f"{member.cluster}:{member.pod}")
    plans = [
        _plan(cluster, group, found, ClusterHosts.of(ours, cluster))
        for (cluster, group), found in sorted(members.items())
    ]
    planned = {(p.cluster_moid, p.name) for p in plans}
    plans += [
        FleetRulePlan(cluster, name, "", None, own=False)
        for (cluster, name), group in sorted(named.items())
        if not group and (cluster, name) not in planned
    ]
    return plans


def _in_cluster(
    others: Iterable[FleetMember], cluster: str, hosts: Mapping[str, EsxiHost]
) -> Iterable[FleetMember]:
    """Other installs' members on hosts of `cluster` in this vCenter, with their VM named."""
    by_label = {h.label: h for h in hosts.values() if h.cluster_moid == cluster}
    for member in others:
        host = by_label.get(member.host)
        if host is None or not member.vm_moid:
            continue
        if member.vsphere_cluster_moid and member.vsphere_cluster_moid != cluster:
            continue
        _, slash, moid = member.host_id.rpartition("/")
        if slash and moid != host.moid:
            continue  # a host of that name in another vCenter
        yield member


def _plan(cluster: str, group: str, members: _Members, hosts: ClusterHosts) -> FleetRulePlan:
    name = fleet_rule_name(cluster, group)
    own = bool(members.own)
    vms = members.vms()
    if len(vms) < 2:
        return FleetRulePlan(cluster, name, group, None, own)
    installs = len({p.split(":", 1)[0] for p in members.pods() if ":" in p}) + int(own)
    rule = DrsObject(
        name=name,
        kind="vm-anti-affinity",
        cluster_moid=cluster,
        vms=vms,
        pods=members.pods(),
        reason=f"{FLEET_REASON} {group}: members of {installs} clusters on {len(vms)} VMs",
    )
    connected = hosts.usable + len(hosts.away)
    if len(vms) > connected:
        message = (
            f"{len(vms)} VMs of fleet group {group} must be on different hosts, but cluster "
            f"{cluster} has {connected} connected hosts (counting those in or entering "
            "maintenance)"
        )
        conflict = Conflict(cluster, name, "too-few-hosts", message, vms, rule.pods)
        return FleetRulePlan(cluster, name, group, rule, own, conflict)
    if len(vms) > hosts.usable:
        what = f"{len(vms)} VMs of fleet group {group} kept apart, {hosts.usable} hosts left"
        held = replace(rule, enabled=False, held_because=hosts.hold_reason(what))
        return FleetRulePlan(cluster, name, group, held, own, maintenance_hosts=hosts.away)
    return FleetRulePlan(cluster, name, group, rule, own)
