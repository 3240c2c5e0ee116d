"""Values of the `hostaffinity-drs` KV bucket: what the drs-translator owns in vCenter.

Only a DRS rule or group that carries this install's name (drs_names.py) *and* has a record here
is ever edited or removed. The record is written before vCenter is asked (`pending`), so
a translator killed between the reconfigure and the confirmation finds its rule again on restart
instead of leaving an orphan or adding a twin.
"""

from typing import Final, Literal

import msgspec

# Name prefix of every rule and group the drs-translator creates.
DRS_NAME_PREFIX: Final = "hostaffinity-"

DrsObjectKind = Literal["vm-anti-affinity", "vm-affinity", "vm-group", "host-group", "vm-host"]
DrsRecordState = Literal["pending", "applied", "removing"]


class DrsOwnership(msgspec.Struct, frozen=True, kw_only=True):
    """One DRS rule or group we created: the value of `rule.<vcenter>.<cluster-moid>.<name>`.

    `vms`/`hosts` are managed object ids, sorted. A VM-Host rule names its groups in `vm_group`
    and `host_group`. `pods` are the `namespace/name`s that asked for it, `reason` says which term
    in words. `state` is `pending` from the moment we decide to write until vCenter confirmed,
    `applied` after, `removing` while a removal is in flight. `held_because` is set while the
    rule is held (disabled in vCenter, record and name kept) so that a host can enter maintenance
    mode, and says why; it is empty while DRS enforces the rule.
    """

    vcenter: str
    cluster_moid: str
    name: str
    kind: DrsObjectKind
    vms: list[str] = []
    hosts: list[str] = []
    vm_group: str = ""
    host_group: str = ""
    mandatory: bool = False
    pods: list[str] = []
    reason: str = ""
    state: DrsRecordState = "pending"
    recorded_at: str = ""
    applied_at: str = ""
    held_because: str = ""
    # The identity of the Kubernetes cluster whose install created it (empty in records of
    # releases before 0.2.0, which the drs-translator rewrites when it renames their objects).
    cluster: str = ""


# vSphere HA's advanced option behind "VM anti-affinity rules must be respected during failover":
# with it, HA does not restart a VM where that would break a VM-VM anti-affinity rule, and reports
# insufficient resources instead (VMware vSphere 6.5 Availability, "vSphere HA and DRS Affinity
# Rules"; "true" by default since 6.5, even without DRS).
HA_RESPECT_VM_ANTI_AFFINITY_OPTION: Final = "das.respectVmVmAntiAffinityRules"

HaAdmissionPolicy = Literal["", "host-failures", "resource-percentage", "dedicated-hosts", "other"]


class ClusterHaSettings(msgspec.Struct, frozen=True, kw_only=True):
    """vSphere HA as a cluster with rules of ours has it (`ClusterConfigInfoEx.dasConfig`): the
    value of `ha.<vcenter>.<cluster-moid>`, written by the drs-translator.

    `admission_control_policy`: host failures the cluster tolerates
    (ClusterFailoverLevelAdmissionControlPolicy), a percentage of resources
    (ClusterFailoverResourcesAdmissionControlPolicy), dedicated failover hosts
    (ClusterFailoverHostAdmissionControlPolicy), "" when none is set; `failover_level` is how
    many host failures it plans for. `respect_option` is the raw value of
    das.respectVmVmAntiAffinityRules ("" when not set); `respects_vm_anti_affinity` what HA does
    with it (not set counts as "true", vSphere's default).
    """

    vcenter: str
    cluster_moid: str
    enabled: bool = False
    admission_control_enabled: bool = False
    admission_control_policy: HaAdmissionPolicy = ""
    failover_level: int = 0
    respect_option: str = ""
    respects_vm_anti_affinity: bool = True
    observed_at: str = ""

    @property
    def restarts_respect_anti_affinity(self) -> bool:
        """HA restarts VMs after a host failure, and never against a VM-VM anti-affinity rule."""
        return self.enabled and self.respects_vm_anti_affinity


class UnprotectedGroup(msgspec.Struct, frozen=True, kw_only=True):
    """A rule or group this install wants in vCenter and vCenter does not hold, so its pods'
    VMs have no DRS rule: `reason` is a `drs.rule.conflict` reason (`too-few-hosts`,
    `together-and-apart`, `no-common-host`, `prefix-without-record`, `refused`) or `not-yet`
    (asked for, not applied yet); `since` when it was first found so."""

    name: str
    kind: DrsObjectKind
    reason: str
    message: str = ""
    vms: list[str] = []
    pods: list[str] = []
    since: str = ""


class OtherInstallRule(msgspec.Struct, frozen=True, kw_only=True):
    """A DRS rule another install of hostaffinity holds in the same vSphere cluster, known by its
    name (`install` is the install token in it; empty for a name of a release before 0.2.0)."""

    name: str
    install: str
    kind: DrsObjectKind
    vms: list[str] = []
    enabled: bool = True
    mandatory: bool = False


SharedHostsRisk = Literal["blocks-maintenance", "no-failover-room"]


class SharedHostsWarning(msgspec.Struct, frozen=True, kw_only=True):
    """What another install's rule does to hosts this install's VMs share: it keeps a host from
    entering maintenance (`blocks-maintenance`: more VMs kept apart than hosts left), or leaves a
    VM of its own that vSphere HA could not restart after one host failure (`no-failover-room`:
    as many VMs kept apart as usable hosts). `hosts` are the hosts in or entering maintenance for
    the first, the usable hosts for the second."""

    risk: SharedHostsRisk
    rule: str
    install: str
    vms: int
    hosts: list[str] = []
    message: str = ""


class DrsClusterReport(msgspec.Struct, frozen=True, kw_only=True):
    """What needs attention in one vSphere cluster, for as long as it lasts: the value of
    `report.<vcenter>.<cluster-moid>`, rewritten by the drs-translator when it changes and
    deleted when there is nothing to say. `cluster` is this install's cluster identity."""

    vcenter: str
    cluster_moid: str
    cluster: str = ""
    reported_at: str = ""
    unprotected: list[UnprotectedGroup] = []
    other_installs: list[OtherInstallRule] = []
    shared_hosts: list[SharedHostsWarning] = []
