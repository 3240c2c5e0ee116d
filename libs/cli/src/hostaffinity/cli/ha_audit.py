"""The HA audit: which node VMs vSphere HA could not restart after one ESXi host failure, because
an anti-affinity rule of ours keeps them apart from every usable host left.

With das.respectVmVmAntiAffinityRules ("VM anti-affinity rules must be respected during
failover") HA does not restart a VM where that would break a VM-VM anti-affinity rule; it reports
insufficient resources instead (VMware vSphere 6.5 Availability, "vSphere HA and DRS Affinity
Rules"). A rule whose VMs number the usable hosts of their cluster has no host to restart the
failed host's VM on. Admission control does not help: it reserves capacity, not rule-free hosts.

Facts: the drs-translator's ownership records (the rules, applied in vCenter) and the HA settings
it keeps beside them, the placements and the hosts from the topology KV. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.schema import DrsOwnership, NodePlacement
from hostaffinity.schema.reports import UnrestartableVm


def _anti_affinity_rules(snapshot: ClusterSnapshot) -> list[DrsOwnership]:
    """Our VM-VM anti-affinity rules that vCenter has (applied), by name."""
    rules = (r for r in snapshot.drs_records if r.kind == "vm-anti-affinity")
    return sorted((r for r in rules if r.state == "applied"), key=lambda r: r.name)


def _placements_by_vm(snapshot: ClusterSnapshot) -> dict[tuple[str, str], NodePlacement]:
    return {(p.vcenter, p.vm_moid): p for p in snapshot.placements.values()}


def usable_hosts(snapshot: ClusterSnapshot, vcenter: str, cluster_moid: str) -> set[str]:
    """Host moids of the cluster HA can restart VMs on: connected and not in maintenance (a
    host with no record in the KV counts when a node placement names it)."""
    hosts = {
        p.host_moid
        for p in snapshot.placements.values()
        if p.vcenter == vcenter and p.cluster_moid == cluster_moid
    }
    hosts |= {h.moid for h in snapshot.hosts.values() if h.cluster_moid == cluster_moid}
    return {
        moid
        for moid in hosts
        if (host := snapshot.hosts.get(moid)) is None
        or (host.connection_state == "connected" and not host.in_maintenance_mode)
    }


def _host_name(snapshot: ClusterSnapshot, moid: str) -> str:
    host = snapshot.hosts.get(moid)
    if host is not None:
        return host.name
    return next((p.host_name for p in snapshot.placements.values() if p.host_moid == moid), moid)


def _respects_rules(snapshot: ClusterSnapshot, rule: DrsOwnership) -> bool:
    ha = snapshot.ha_settings.get((rule.vcenter, rule.cluster_moid))
    return ha is not None and ha.restarts_respect_anti_affinity


def unrestartable_after(snapshot: ClusterSnapshot, failed: Iterable[str]) -> list[UnrestartableVm]:
    """The node VMs on the `failed` host (its moids: one per vCenter) HA could not restart, by
    rule then VM. Where a rule has more VMs on the host than free hosts are left, the VMs past
    the free hosts' count are the ones named (HA picks which; the count is what is certain)."""
    failed_hosts = set(failed)
    by_vm = _placements_by_vm(snapshot)
    found: list[UnrestartableVm] = []
    for rule in _anti_affinity_rules(snapshot):
        if not _respects_rules(snapshot, rule):
            continue
        placed = [p for vm in rule.vms if (p := by_vm.get((rule.vcenter, vm))) is not None]
        down = sorted((p for p in placed if p.host_moid in failed_hosts), key=lambda p: p.vm_moid)
        if not down:
            continue
        left = usable_hosts(snapshot, rule.vcenter, rule.cluster_moid) - failed_hosts
        free = left - {p.host_moid for p in placed}
        names = sorted(_host_name(snapshot, moid) for moid in left)
        found.extend(
            UnrestartableVm(
                vm_moid=p.vm_moid,
                node=p.node,
                host=p.host_name,
                cluster_moid=rule.cluster_moid,
                rule=rule.name,
                pods=sorted(rule.pods),
                hosts_left=names,
            )
            for p in down[len(free) :]
        )
    return found


def rules_without_failover_room(snapshot: ClusterSnapshot) -> dict[str, list[UnrestartableVm]]:
    """Rule name → the VMs it strands, over every single host failure among its VMs' hosts."""
    by_vm = _placements_by_vm(snapshot)
    hosts = sorted(
        {
            (p.vcenter, p.host_moid)
            for rule in _anti_affinity_rules(snapshot)
            if _respects_rules(snapshot, rule)
            for vm in rule.vms
            if (p := by_vm.get((rule.vcenter, vm))) is not None
        }
    )
    stranded: dict[str, list[UnrestartableVm]] = {}
    for _, moid in hosts:
        for vm in unrestartable_after(snapshot, [moid]):
            stranded.setdefault(vm.rule, []).append(vm)
    return stranded


def failover_sentence(rule: str, stranded: Sequence[UnrestartableVm]) -> str:
    """One sentence for `status` and `explain`: the rule, and what a host failure does."""
    first = stranded[0]
    hosts = sorted({vm.host for vm in stranded})
    return (
        f"DRS anti-affinity rule {rule} (cluster {first.cluster_moid}) leaves no host to spare: "
        f"vSphere HA respects VM-VM anti-affinity rules during failover, so if ESXi host "
        f"{' or '.join(hosts)} fails, its node VM cannot restart (the usable hosts left each run "
        "a VM of the rule). Add a host, or set HA's das.respectVmVmAntiAffinityRules to false "
        "(see `hostaffinity what-if host-failure HOST`)"
    )


def clusters_of_rules_on(snapshot: ClusterSnapshot, failed: Iterable[str]) -> list[tuple[str, str]]:
    """(vCenter, cluster moid) of each of our anti-affinity rules with a VM on the failed host."""
    failed_hosts = set(failed)
    by_vm = _placements_by_vm(snapshot)
    clusters = {
        (rule.vcenter, rule.cluster_moid)
        for rule in _anti_affinity_rules(snapshot)
        for vm in rule.vms
        if (p := by_vm.get((rule.vcenter, vm))) is not None and p.host_moid in failed_hosts
    }
    return sorted(clusters)
