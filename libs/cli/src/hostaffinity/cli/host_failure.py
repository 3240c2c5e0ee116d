"""`hostaffinity what-if host-failure HOST`: what one ESXi host failure would expose, and which
node VMs vSphere HA could not restart.

The pods on the host's nodes and where they could go are `what-if maintenance`'s report of that
host (maintenance.py): if their node VMs do not come back, that is where kube-scheduler puts them.
Which VMs do not come back is the HA audit's (ha_audit.py).
"""

from __future__ import annotations

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.cli.ha_audit import HaAudit
from hostaffinity.cli.maintenance import maintenance_report, render_maintenance
from hostaffinity.cli.snapshot import ClusterSnapshot, other_installs_on
from hostaffinity.schema import ClusterHaSettings
from hostaffinity.schema.reports import HostFailureReport

_POLICY_WORDS = {
    "host-failures": "host failures the cluster tolerates",
    "resource-percentage": "percentage of cluster resources",
    "dedicated-hosts": "dedicated failover hosts",
    "other": "another policy",
}


def host_failure_report(
    snapshot: ClusterSnapshot, engine: AffinityEngine, host: str
) -> HostFailureReport:
    """The report for `host` failing; raises UnknownHostError (maintenance.py) for a bad name."""
    exposed = maintenance_report(snapshot, engine, [host])
    (label,) = exposed.hosts
    moids = {h.moid for h in snapshot.hosts.values() if h.label == label}
    moids |= {p.host_moid for p in snapshot.placements.values() if p.host_label == label}
    audit = HaAudit(snapshot)
    stranded = audit.unrestartable_after(moids)
    clusters = audit.clusters_of_rules_on(moids)
    names = {h.name for h in snapshot.hosts.values() if h.label == label}
    others = [
        w.message
        for w in other_installs_on(snapshot, [label], also_away=False)
        if w.risk == "no-failover-room" and names & set(w.hosts)
    ]
    return HostFailureReport(
        host=label,
        exposed=exposed,
        ha=[snapshot.ha_settings[c] for c in clusters if c in snapshot.ha_settings],
        ha_unknown=[moid for (vc, moid) in clusters if (vc, moid) not in snapshot.ha_settings],
        unrestartable=stranded,
        ok=exposed.ok and not stranded,
        other_installs_unrestartable=others,
    )


def _unknown(cluster_moid: str) -> str:
    return (
        f"vSphere HA of cluster {cluster_moid}: not known (the drs-translator records it; is it "
        "running, with ha_audit enabled?)"
    )


def _ha(view: ClusterHaSettings) -> str:
    """HA's settings in one line; `view` is the drs-translator's record."""
    if not view.enabled:
        return f"vSphere HA of cluster {view.cluster_moid}: off (no node VM restarts by itself)"
    control = (
        f"admission control on ({_POLICY_WORDS.get(view.admission_control_policy, 'no policy')}"
        + (f", {view.failover_level} host failure(s)" if view.failover_level else "")
        + ")"
        if view.admission_control_enabled
        else "admission control off"
    )
    respect = (
        "failover respects VM-VM anti-affinity rules"
        if view.respects_vm_anti_affinity
        else "failover may break VM-VM anti-affinity rules (das.respectVmVmAntiAffinityRules "
        "false): every VM restarts, possibly next to a VM its rule keeps it from"
    )
    return f"vSphere HA of cluster {view.cluster_moid}: on; {control}; {respect}"


def render_host_failure(report: HostFailureReport) -> str:
    parts = [f"if ESXi host {report.host} fails:", render_maintenance(report.exposed)]
    parts.extend(_ha(view) for view in report.ha)
    parts.extend(_unknown(moid) for moid in report.ha_unknown)
    if report.unrestartable:
        lines = [
            f"  VM {vm.vm_moid} (node {vm.node}): DRS rule {vm.rule} keeps it from every usable "
            f"host left ({', '.join(vm.hosts_left) or 'none'}), each running a VM of the rule; "
            f"asked for by {', '.join(vm.pods) or 'no pod any more'}"
            for vm in report.unrestartable
        ]
        parts.append(
            f"{len(report.unrestartable)} node VM(s) vSphere HA could not restart:\n"
            + "\n".join(lines)
        )
    else:
        parts.append("no anti-affinity rule of ours keeps a node VM on it from restarting")
    if report.other_installs_unrestartable:
        others = "\n".join(f"  {sentence}" for sentence in report.other_installs_unrestartable)
        parts.append(f"other installs' rules on the same hosts:\n{others}")
    return "\n\n".join(parts)
