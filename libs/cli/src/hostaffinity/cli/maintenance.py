"""`hostaffinity what-if maintenance HOST...`: what must move, whether it can, which rules break.

Hosts are named as the operator knows them (label value, full name or moid). The plan is the
affinity library's (maintenance.py): the engine in kube-scheduler mode with the hosts' nodes
gone, plus requests against allocatable.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.maintenance import plan_maintenance
from hostaffinity.cli.snapshot import ClusterSnapshot, host_spellings, other_installs_on
from hostaffinity.cli.tables import table
from hostaffinity.schema.reports import MaintenanceReport


class UnknownHostError(ValueError):
    """A host name matched no ESXi host in the topology KV or the node labels."""


def maintenance_report(
    snapshot: ClusterSnapshot, engine: AffinityEngine, hosts: Sequence[str]
) -> MaintenanceReport:
    """The plan for taking `hosts` away; raises UnknownHostError naming what did not match."""
    spellings = host_spellings(snapshot)
    unknown = [name for name in hosts if name not in spellings]
    if unknown:
        raise UnknownHostError(
            f"no ESXi host named {', '.join(unknown)} (try `hostaffinity topology`)"
        )
    labels = [spellings[name] for name in hosts]
    plan = plan_maintenance(engine, labels, snapshot.pods, snapshot.requests, snapshot.allocatable)
    blocking = [
        w.message
        for w in other_installs_on(snapshot, labels, also_away=True)
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
