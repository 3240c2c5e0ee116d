"""What needs a person in one vSphere cluster, as a `DrsClusterReport`: pure, from a cycle's plan,
what vCenter holds after it, and the hosts.

- Unprotected groups: each rule or group the plan wants that vCenter does not hold, whatever
  the reason (a conflict held back, a name of ours without a record, a refusal, not applied
  yet). `status`, `explain pod`, a metric and an alert read it for as long as it lasts.
- Other installs' rules: many Kubernetes clusters' installs share the vSphere cluster's hosts.
  Their rules are known by their names (never touched); each is judged against the hosts left,
  as ours are by the planner: an enabled VM-VM anti-affinity rule over more VMs than the hosts
  not in or entering maintenance keeps a host from entering it (DRS will not break the rule to
  evacuate it), and one over as many VMs as usable hosts leaves no host for vSphere HA to
  restart a failed host's VM on (when HA respects VM anti-affinity rules, its default). Rules
  over different VMs bind independently, so judging each rule against the hosts is judging them
  together: the installs' node VMs never overlap, and no rule of one install names another's.
"""

from collections.abc import Iterable, Mapping, Sequence

from hostaffinity.drs_translator.planner import CONNECTED, ClusterPlan, Conflict
from hostaffinity.drs_translator.rules import DrsObject
from hostaffinity.schema import (
    DrsObjectKind,
    EsxiHost,
    OtherInstallRule,
    SharedHostsWarning,
    UnprotectedGroup,
    parse_drs_name,
)


def unprotected_groups(
    plan: ClusterPlan,
    conflicts: Iterable[Conflict],
    actual: Mapping[str, DrsObject],
    refused: Mapping[str, str],
    unowned: Iterable[str],
) -> list[UnprotectedGroup]:
    """Each object the plan wants that vCenter does not hold as ours, with why. `refused`: name
    → vCenter's refusal of it (retried with backoff); `unowned`: names of ours without a
    record."""
    found: dict[str, UnprotectedGroup] = {}
    for conflict in conflicts:
        if conflict.cluster_moid == plan.cluster_moid and conflict.name:
            found[conflict.name] = UnprotectedGroup(
                name=conflict.name,
                kind=_kind(conflict.name),
                reason=conflict.reason,
                message=conflict.message,
                vms=list(conflict.vms),
                pods=list(conflict.pods),
            )
    taken = set(unowned)
    for name, wanted in sorted(plan.objects.items()):
        if name in found or (name in actual and name not in taken):
            continue
        if name in taken:
            reason, message = (
                "prefix-without-record",
                ("vCenter holds an object of this name that this install has no record of"),
            )
        elif name in refused:
            reason, message = "refused", f"vCenter refused it: {refused[name]}"
        else:
            reason, message = "not-yet", "asked for; vCenter does not hold it yet"
        found[name] = UnprotectedGroup(
            name=name,
            kind=wanted.kind,
            reason=reason,
            message=message,
            vms=list(wanted.vms),
            pods=list(wanted.pods),
        )
    return [found[name] for name in sorted(found)]


def other_install_rules(objects: Iterable[DrsObject]) -> list[OtherInstallRule]:
    """The rules among other installs' objects (their groups are only what the rules name)."""
    rules = []
    for obj in sorted(objects, key=lambda o: o.name):
        parsed = parse_drs_name(obj.name)
        if parsed is None or not obj.is_rule:
            continue
        rules.append(
            OtherInstallRule(
                name=obj.name,
                install=parsed.install or "",
                kind=obj.kind,
                vms=list(obj.vms),
                enabled=obj.enabled,
                mandatory=obj.mandatory,
            )
        )
    return rules


def shared_hosts_warnings(
    rules: Sequence[OtherInstallRule], hosts: Iterable[EsxiHost]
) -> list[SharedHostsWarning]:
    """What other installs' enabled anti-affinity rules do to the cluster's hosts (`hosts`: the
    cluster's, from the topology)."""
    connected = [h for h in hosts if h.connection_state == CONNECTED]
    away = sorted(h.name for h in connected if h.in_maintenance_mode or h.entering_maintenance)
    usable = sorted(h.name for h in connected if h.name not in away)
    warnings = []
    for rule in rules:
        if rule.kind != "vm-anti-affinity" or not rule.enabled:
            continue
        owner = f"install {rule.install}" if rule.install else "an install before 0.2.0"
        count = len(rule.vms)
        if away and count > len(usable):
            warnings.append(
                SharedHostsWarning(
                    risk="blocks-maintenance",
                    rule=rule.name,
                    install=rule.install,
                    vms=count,
                    hosts=away,
                    message=(
                        f"DRS rule {rule.name} of {owner} keeps {count} VMs on different hosts "
                        f"and {len(usable)} are left: hosts {', '.join(away)} cannot finish "
                        f"entering maintenance until {owner} holds it"
                    ),
                )
            )
        elif usable and count >= len(usable):
            warnings.append(
                SharedHostsWarning(
                    risk="no-failover-room",
                    rule=rule.name,
                    install=rule.install,
                    vms=count,
                    hosts=usable,
                    message=(
                        f"DRS rule {rule.name} of {owner} keeps {count} VMs on the "
                        f"{len(usable)} usable hosts apart: if one fails, vSphere HA cannot "
                        "restart its VM of that rule while HA respects VM anti-affinity rules"
                    ),
                )
            )
    return warnings


def _kind(name: str) -> DrsObjectKind:
    parsed = parse_drs_name(name)
    return parsed.kind if parsed is not None else "vm-anti-affinity"
