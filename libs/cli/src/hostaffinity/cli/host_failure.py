"""`hostaffinity what-if host-failure HOST`: what one ESXi host failure would expose, and which
node VMs vSphere HA could not restart.

The pods on the host's nodes and where they could go are `what-if maintenance`'s report of that
host (maintenance.py): if their node VMs do not come back, that is where kube-scheduler puts them.
Which VMs do not come back is the HA audit's (ha_audit.py). The host is one host of one vCenter
(host_names.py); with several vCenters its clusters and hosts are printed `<vcenter>/<name>`.
"""

from __future__ import annotations

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.cli.ha_audit import HaAudit
from hostaffinity.cli.host_names import HostNames
from hostaffinity.cli.maintenance import plan_for, render_maintenance
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
    """The report for `host` failing; raises UnknownHostError (host_names.py) for a name that
    matches no host, or hosts of several vCenters."""
    names = HostNames(snapshot)
    found = names.find(host)
    exposed = plan_for(snapshot, engine, names, [found])
    # A host known only from a node's label has no placement: the audit finds nothing on it.
    failed = {(found.vcenter, found.moid)} if found.moid else set()
    audit = HaAudit(snapshot)
    clusters = audit.clusters_of_rules_on(failed)
    stranded = audit.unrestartable_after(failed)
    others = [
        w.message
        for w in other_installs_on(snapshot, failed, also_away=False)
        if w.risk == "no-failover-room" and found.name in w.hosts
    ]
    return HostFailureReport(
        host=exposed.hosts[0],
        exposed=exposed,
        ha=[snapshot.ha_settings[c] for c in clusters if c in snapshot.ha_settings],
        ha_unknown=[
            names.qualified(vc, moid)
            for (vc, moid) in clusters
            if (vc, moid) not in snapshot.ha_settings
        ],
        unrestartable=[
            msgspec.structs.replace(
                vm,
                host=names.qualified(found.vcenter, vm.host),
                cluster_moid=names.qualified(found.vcenter, vm.cluster_moid),
                hosts_left=[names.qualified(found.vcenter, left) for left in vm.hosts_left],
            )
            for vm in stranded
        ],
        ok=exposed.ok and not stranded,
        vcenter=found.vcenter if names.several_vcenters else "",
        other_installs_unrestartable=others,
    )


def _unknown(cluster: str) -> str:
    return (
        f"vSphere HA of cluster {cluster}: not known (the drs-translator records it; is it "
        "running, with ha_audit enabled?)"
    )


def _ha(view: ClusterHaSettings, cluster: str) -> str:
    """HA's settings in one line; `view` is the drs-translator's record of `cluster`."""
    if not view.enabled:
        return f"vSphere HA of cluster {cluster}: off (no node VM restarts by itself)"
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
    return f"vSphere HA of cluster {cluster}: on; {control}; {respect}"


def render_host_failure(report: HostFailureReport) -> str:
    parts = [f"if ESXi host {report.host} fails:", render_maintenance(report.exposed)]
    parts.extend(
        _ha(view, f"{view.vcenter}/{view.cluster_moid}" if report.vcenter else view.cluster_moid)
        for view in report.ha
    )
    parts.extend(_unknown(cluster) for cluster in report.ha_unknown)
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
