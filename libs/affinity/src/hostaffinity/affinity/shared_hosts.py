"""What other installs' DRS rules do to the ESXi hosts an install shares with them: pure, shared by
the drs-translator (its cluster reports and holds) and the CLI (`what-if`).

Many Kubernetes clusters' installs of hostaffinity put their node VMs on the same vSphere
cluster's hosts. Another install's rules are known by their names and never touched; each is
judged against the hosts left, as the drs-translator's planner judges its own: an enabled VM-VM
anti-affinity rule over more VMs than the hosts not in (or entering) maintenance keeps a host
from entering it (DRS does not break the rule to evacuate a host), and one over as many VMs as
the usable hosts leaves no host for vSphere HA to restart a failed host's VM on (while HA
respects VM anti-affinity rules, its default). Rules over different VMs bind independently, so
judging each rule against the hosts is judging them together: installs' node VMs never overlap
and no rule of one install names another's VMs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Final

from hostaffinity.schema import FLEET_TOKEN, EsxiHost, OtherInstallRule, SharedHostsWarning
from hostaffinity.schema.drs import SharedHostsRisk

CONNECTED: Final = "connected"


def shared_hosts_warnings(
    rules: Sequence[OtherInstallRule],
    hosts: Iterable[EsxiHost],
    also_away: Collection[str] = (),
) -> list[SharedHostsWarning]:
    """What other installs' enabled anti-affinity `rules` do to one vSphere cluster's `hosts`;
    `also_away` names hosts to count as in maintenance too (a what-if)."""
    connected = [h for h in hosts if h.connection_state == CONNECTED]
    away = sorted(
        h.name
        for h in connected
        if h.in_maintenance_mode or h.entering_maintenance or h.name in also_away
    )
    usable = sorted(h.name for h in connected if h.name not in away)
    warnings = []
    for rule in rules:
        if rule.kind != "vm-anti-affinity" or not rule.enabled:
            continue
        owner = _owner(rule.install)
        count = len(rule.vms)
        if away and count > len(usable):
            message = (
                f"DRS rule {rule.name} of {owner} keeps {count} VMs on different hosts and "
                f"{len(usable)} are left: hosts {', '.join(away)} cannot finish entering "
                f"maintenance until {owner} holds it"
            )
            warnings.append(_warning("blocks-maintenance", rule, away, message))
        elif usable and count >= len(usable):
            message = (
                f"DRS rule {rule.name} of {owner} keeps {count} VMs on the {len(usable)} usable "
                "hosts apart: if one fails, vSphere HA cannot restart its VM of that rule while "
                "HA respects VM anti-affinity rules"
            )
            warnings.append(_warning("no-failover-room", rule, usable, message))
    return warnings


def _warning(
    risk: SharedHostsRisk, rule: OtherInstallRule, hosts: list[str], message: str
) -> SharedHostsWarning:
    return SharedHostsWarning(
        risk=risk, rule=rule.name, install=rule.install, vms=len(rule.vms), hosts=hosts,
        message=message,
    )  # fmt: skip


def _owner(install: str) -> str:
    """Who holds a rule, in words: an install, a release before install identities, or the fleet
    (a fleet group's rule, written by whichever install holds its lease on the hub)."""
    if install == FLEET_TOKEN:
        return "the fleet (the install holding its lease)"
    return f"install {install}" if install else "an install before 0.2.0"
