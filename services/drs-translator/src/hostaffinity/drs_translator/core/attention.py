"""What needs a person in one vSphere cluster, as a `DrsClusterReport`: pure, from a cycle's plan,
what vCenter holds after it, and the hosts.

- Unprotected groups: each rule or group the plan wants that vCenter does not hold, whatever
  the reason (a conflict held back, a name of ours without a record, a refusal, not applied
  yet). `status`, `explain pod`, a metric and an alert read it for as long as it lasts.
- Other installs' rules: many Kubernetes clusters' installs share the vSphere cluster's hosts;
  their rules, known by their names and never touched, are listed here, and what they do to the
  shared hosts is judged by the affinity library (shared_hosts.py).
"""

from collections.abc import Iterable, Mapping

from hostaffinity.drs_translator.core.plan import ClusterPlan, Conflict
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.schema import (
    DrsObjectKind,
    OtherInstallRule,
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


def _kind(name: str) -> DrsObjectKind:
    parsed = parse_drs_name(name)
    return parsed.kind if parsed is not None else "vm-anti-affinity"
