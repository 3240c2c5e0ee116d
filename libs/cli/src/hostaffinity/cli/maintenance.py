"""`hostaffinity what-if maintenance HOST...`: what must move, whether it can, which rules break.

Hosts are named as the operator knows them (label value, full name or moid; `<vcenter>/<host>`
where moids and names repeat across vCenters: host_names.py), and printed so. The plan is the
affinity library's (maintenance.py): the engine in kube-scheduler mode with the hosts' nodes
gone, plus requests against allocatable.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.maintenance import plan_maintenance
from hostaffinity.cli.host_names import (
    AmbiguousHostError,
    HostNames,
    KnownHost,
    UnknownHostError,
)
from hostaffinity.cli.snapshot import ClusterSnapshot, other_installs_on
from hostaffinity.cli.tables import table
from hostaffinity.schema.reports import MaintenanceReport


def maintenance_report(
    snapshot: ClusterSnapshot, engine: AffinityEngine, hosts: Sequence[str]
) -> MaintenanceReport:
    """The plan for taking `hosts` away; raises UnknownHostError naming what did not match (or
    matched hosts of several vCenters)."""
    names = HostNames(snapshot)
    found: list[KnownHost] = []
    unknown: list[str] = []
    for spelling in hosts:
        try:
            found.append(names.find(spelling))
        except AmbiguousHostError:
            raise
        except UnknownHostError:
            unknown.append(spelling)
    if unknown:
        raise UnknownHostError(
            f"no ESXi host named {', '.join(unknown)} (try `hostaffinity topology`)"
        )
    return plan_for(snapshot, engine, names, found)


def plan_for(
    snapshot: ClusterSnapshot, engine: AffinityEngine, names: HostNames, hosts: list[KnownHost]
) -> MaintenanceReport:
    """The plan for `hosts`, named as `names` prints them; with the enabled DRS rules of other
    installs on the same hosts that would keep them from entering maintenance."""
    plan = plan_maintenance(
        engine,
        [names.name(host.vcenter, host.moid, host.name) for host in hosts],
        snapshot.pods,
        snapshot.requests,
        snapshot.allocatable,
        nodes=names.nodes_on(hosts),
    )
    keys = {(host.vcenter, host.moid) for host in hosts if host.moid}
    blocking = [
        w.message
        for w in other_installs_on(snapshot, keys, also_away=True)
        if w.risk == "blocks-maintenance"
    ]
    return msgspec.structs.replace(
        plan, blocked_by_other_installs=blocking, ok=plan.ok and not blocking
    )


def render_maintenance(report: MaintenanceReport) -> str:
    header = ["POD", "VMI", "FROM NODE", "VERDICT", "TO NODE / WHY NOT"]
    rows = [
        [
            m.pod,
            m.vmi or "-",
            m.from_node,
            m.verdict,
            m.to_node if m.verdict == "moves" else m.reason,
        ]
        for m in report.moves
    ]
    parts = [
        f"hosts {', '.join(report.hosts)}: {len(report.nodes)} nodes, "
        f"{len(report.moves)} pods to move"
    ]
    if rows:
        parts.append(table(header, rows))
    if report.unsatisfiable_rules:
        rules = "\n".join(f"  {r.pod}: {r.rule}" for r in report.unsatisfiable_rules)
        parts.append(f"required host-level rules that would become unsatisfiable:\n{rules}")
    if report.blocked_by_other_installs:
        lines = "\n".join(f"  {sentence}" for sentence in report.blocked_by_other_installs)
        parts.append(f"other installs' rules on these hosts would keep them busy:\n{lines}")
    stuck = sum(m.verdict != "moves" for m in report.moves)
    parts.append(
        f"{stuck} pod(s) would have nowhere to go"
        if stuck
        else "every pod has somewhere to go"
        + ("" if report.ok else ", but the hosts cannot finish entering maintenance")
    )
    return "\n\n".join(parts)
