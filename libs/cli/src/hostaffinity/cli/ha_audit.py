"""The HA audit: which node VMs vSphere HA could not restart after one ESXi host failure, because
an anti-affinity rule of ours keeps them apart from every usable host left.

With das.respectVmVmAntiAffinityRules ("VM anti-affinity rules must be respected during
failover") HA does not restart a VM where that would break a VM-VM anti-affinity rule; it reports
insufficient resources instead (VMware vSphere 6.5 Availability, "vSphere HA and DRS Affinity
Rules"). A rule whose VMs number the usable hosts of their cluster has no host to restart the
failed host's VM on. Admission control does not help: it reserves capacity, not rule-free hosts.

Facts: the drs-translator's ownership records (the rules, applied in vCenter) and the HA settings
it keeps beside them, the placements and the hosts from the topology KV. Pure: no I/O. Indexed
once per snapshot (VMs by moid, usable hosts per cluster), so a rule costs its own VMs and hosts,
whatever the size of the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property

from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.schema import DrsOwnership, NodePlacement
from hostaffinity.schema.reports import UnrestartableVm


class HaAudit:
    """The audit over one snapshot."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot
        self._usable: dict[tuple[str, str], set[str]] = {}

    @cached_property
    def _rules(self) -> list[DrsOwnership]:
        """Our VM-VM anti-affinity rules that vCenter has (applied), by name."""
        rules = (r for r in self._snapshot.drs_records if r.kind == "vm-anti-affinity")
        return sorted((r for r in rules if r.state == "applied"), key=lambda r: r.name)

    @cached_property
    def _by_vm(self) -> dict[tuple[str, str], NodePlacement]:
        return {(p.vcenter, p.vm_moid): p for p in self._snapshot.placements.values()}

    @cached_property
    def _host_names(self) -> dict[str, str]:
        names = {p.host_moid: p.host_name for p in self._snapshot.placements.values()}
        return names | {h.moid: h.name for h in self._snapshot.hosts.values()}

    def _placed(self, rule: DrsOwnership) -> list[NodePlacement]:
        return [p for vm in rule.vms if (p := self._by_vm.get((rule.vcenter, vm))) is not None]

    def _respected(self, rule: DrsOwnership) -> bool:
        """HA is on in the rule's cluster and never restarts a VM against the rule."""
        ha = self._snapshot.ha_settings.get((rule.vcenter, rule.cluster_moid))
        return ha is not None and ha.restarts_respect_anti_affinity

    def usable_hosts(self, vcenter: str, cluster_moid: str) -> set[str]:
        """Host moids of the cluster HA can restart VMs on: connected and not in maintenance (a
        host with no record in the KV counts when a node placement names it)."""
        key = (vcenter, cluster_moid)
        if key not in self._usable:
            snapshot = self._snapshot
            hosts = {
                p.host_moid
                for p in snapshot.placements.values()
                if p.vcenter == vcenter and p.cluster_moid == cluster_moid
            }
            records = snapshot.hosts_by_vcenter
            hosts |= {
                moid
                for (host_vcenter, moid), host in records.items()
                if host_vcenter == vcenter and host.cluster_moid == cluster_moid
            }
            self._usable[key] = {
                moid
                for moid in hosts
                if (host := records.get((vcenter, moid))) is None
                or (host.connection_state == "connected" and not host.in_maintenance_mode)
            }
        return self._usable[key]

    def _stranded(self, rule: DrsOwnership, failed: set[str]) -> list[UnrestartableVm]:
        """The rule's VMs on the failed host that find no free usable host. Where more are down
        than free hosts are left, those past the free hosts' count are named (HA picks which;
        the count is what is certain)."""
        placed = self._placed(rule)
        down = sorted((p for p in placed if p.host_moid in failed), key=lambda p: p.vm_moid)
        if not down:
            return []
        usable = self.usable_hosts(rule.vcenter, rule.cluster_moid)
        # Free: usable, not failed, and running no VM of the rule (counted, not copied).
        free = len(usable) - len(({p.host_moid for p in placed} | failed) & usable)
        if len(down) <= free:
            return []
        names = sorted(self._host_names.get(moid, moid) for moid in usable - failed)
        return [
            UnrestartableVm(
                vm_moid=p.vm_moid,
                node=p.node,
                host=p.host_name,
                cluster_moid=rule.cluster_moid,
                rule=rule.name,
                pods=sorted(rule.pods),
                hosts_left=names,
            )
            for p in down[free:]
        ]

    def unrestartable_after(self, failed: Iterable[tuple[str, str]]) -> list[UnrestartableVm]:
        """The node VMs on the failed host, by (vCenter, moid) (moids repeat across vCenters),
        HA could not restart, by rule then VM."""
        failed_hosts = set(failed)
        return [
            vm
            for rule in self._rules
            if self._respected(rule)
            for vm in self._stranded(rule, _in_vcenter(rule.vcenter, failed_hosts))
        ]

    def rules_without_failover_room(self) -> dict[str, list[UnrestartableVm]]:
        """Rule name → the VMs it strands, over every single failure of a host of its VMs."""
        found: dict[str, list[UnrestartableVm]] = {}
        for rule in self._rules:
            if not self._respected(rule):
                continue
            hosts = sorted({p.host_moid for p in self._placed(rule)})
            stranded = [vm for host in hosts for vm in self._stranded(rule, {host})]
            if stranded:
                found[rule.name] = stranded
        return found

    def clusters_of_rules_on(self, failed: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """(vCenter, cluster moid) of each of our anti-affinity rules with a VM on the failed
        host (by vCenter and moid), whatever HA's settings there."""
        failed_hosts = set(failed)
        return sorted(
            {
                (rule.vcenter, rule.cluster_moid)
                for rule in self._rules
                if any((rule.vcenter, p.host_moid) in failed_hosts for p in self._placed(rule))
            }
        )


def _in_vcenter(vcenter: str, hosts: set[tuple[str, str]]) -> set[str]:
    return {moid for host_vcenter, moid in hosts if host_vcenter == vcenter}


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
