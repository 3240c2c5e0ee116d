"""KubeVirt: which virt-launcher pods move by live migration, and the migration limits.

A virt-launcher pod is never evicted by the descheduler: evicting it kills the VM. When its
VMI's `evictionStrategy` is LiveMigrate, or LiveMigrateIfPossible and the VMI reports the
LiveMigratable condition, the descheduler creates a VirtualMachineInstanceMigration instead.
A VM that cannot migrate is left in place with an Event on the VMI saying why -- unless its
owner consented to a restart by annotating the VMI `descheduler.alpha.kubernetes.io/evict`
(the descheduler's own opt-in, seed 003): then its virt-launcher pod is evicted through the
Eviction API like any pod (PodDisruptionBudgets hold), the VM stops, and its VirtualMachine
(or pool, or VMIRS) starts it again where it may run.

Limits are the cluster's own, read from the KubeVirt CR (`spec.configuration.migrations.
parallelMigrationsPerCluster` / `parallelOutboundMigrationsPerNode`, KubeVirt's defaults where it
names none: pkg/virt-config/virt-config.go, 5 and 2); `descheduler.migrations` in our config
overrides them. The migrations already in flight count against them.

The target: KubeVirt >= 1.5 takes `spec.addedNodeSelector` on a migration (a map of node labels
the target pod must also match, api/core/v1 VirtualMachineInstanceMigrationSpec), so where the
CR's `status.observedKubeVirtVersion` says so the migration is pinned, by hostname label, to the
node the descheduler checked; an older KubeVirt lets kube-scheduler choose, and the Event says
so.
"""

from __future__ import annotations

import enum
from typing import Final, TypeVar

import msgspec

from hostaffinity.affinity.model import ApiStruct as _ApiStruct
from hostaffinity.affinity.model import ObjectMeta, Pod
from hostaffinity.affinity.vm_placement import (
    VmCondition,
    VmPlacement,
    VmSpec,
    VmStatus,
    awaiting_restart,
)
from hostaffinity.descheduler.config import (
    PARALLEL_MIGRATIONS_PER_CLUSTER,
    PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
    MigrationLimits,
)

VIRT_LAUNCHER_LABEL: Final = "kubevirt.io"
VIRT_LAUNCHER_VALUE: Final = "virt-launcher"
VMI_KIND: Final = "VirtualMachineInstance"
LIVE_MIGRATE: Final = "LiveMigrate"
LIVE_MIGRATE_IF_POSSIBLE: Final = "LiveMigrateIfPossible"
FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
# The upstream descheduler's annotation, read on the VMI as the owner's consent to a restart.
RESTART_CONSENT: Final = "descheduler.alpha.kubernetes.io/evict"
P = TypeVar("P", bound=Pod)


class _Object(_ApiStruct, frozen=True):
    """A namespaced KubeVirt object: its metadata, known by `namespace/name`."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class VmiSpec(VmPlacement, frozen=True):
    eviction_strategy: str | None = None


class VmiStatus(_ApiStruct, frozen=True):
    phase: str = ""
    node_name: str = ""
    conditions: list[VmCondition] = msgspec.field(default_factory=list)


class VirtualMachineInstance(_Object, frozen=True):
    spec: VmiSpec = msgspec.field(default_factory=VmiSpec)
    status: VmiStatus = msgspec.field(default_factory=VmiStatus)

    def live_migratable(self) -> tuple[bool, str]:
        """The LiveMigratable condition, and its message when it is not True."""
        for condition in self.status.conditions:
            if condition.type == "LiveMigratable":
                return condition.status == "True", condition.message
        return False, "the VMI does not report the LiveMigratable condition"


class VirtualMachine(_Object, frozen=True):
    """A VirtualMachine: its owner (a VirtualMachinePool's VMs are one workload), the placement
    its template asks for, and whether KubeVirt says it needs a restart."""

    spec: VmSpec = msgspec.field(default_factory=VmSpec)
    status: VmStatus = msgspec.field(default_factory=VmStatus)


def placement_awaiting_restart(vm: VirtualMachine, vmi: VirtualMachineInstance | None) -> str:
    """The placement fields the VM's template changed and its running VMI does not have, when
    KubeVirt holds them for a restart (vm_placement.awaiting_restart); empty otherwise."""
    if vmi is None:
        return ""
    return ", ".join(awaiting_restart(vm.spec.template.spec, vmi.spec, vm.status.conditions))


def vm_owner(obj: _Object) -> tuple[str, str] | None:
    """(kind, name) of a KubeVirt object's controller ownerReference, if any."""
    for ref in obj.metadata.owner_references:
        if ref.controller:
            return ref.kind, ref.name
    return None


class MigrationSpec(_ApiStruct, frozen=True):
    vmi_name: str = ""


class MigrationState(_ApiStruct, frozen=True):
    source_node: str = ""
    target_node: str = ""


class MigrationStatus(_ApiStruct, frozen=True):
    phase: str = ""
    migration_state: MigrationState | None = None


class VirtualMachineInstanceMigration(_Object, frozen=True):
    spec: MigrationSpec = msgspec.field(default_factory=MigrationSpec)
    status: MigrationStatus = msgspec.field(default_factory=MigrationStatus)

    @property
    def in_flight(self) -> bool:
        return self.status.phase not in FINISHED_PHASES


_VMI: Final = msgspec.json.Decoder(VirtualMachineInstance)
_VM: Final = msgspec.json.Decoder(VirtualMachine)
_VMIM: Final = msgspec.json.Decoder(VirtualMachineInstanceMigration)


def decode_vmi(data: bytes | str) -> VirtualMachineInstance:
    return _VMI.decode(data)


def decode_vm(data: bytes | str) -> VirtualMachine:
    return _VM.decode(data)


def decode_migration(data: bytes | str) -> VirtualMachineInstanceMigration:
    return _VMIM.decode(data)


def launcher_vmi(pod: Pod) -> str | None:
    """`namespace/name` of the VMI a virt-launcher pod runs, or None for any other pod."""
    if pod.metadata.labels.get(VIRT_LAUNCHER_LABEL) != VIRT_LAUNCHER_VALUE:
        return None
    for ref in pod.metadata.owner_references:
        if ref.kind == VMI_KIND:
            return f"{pod.metadata.namespace}/{ref.name}"
    return None


def with_vmi_rules(pod: P, vmi: VirtualMachineInstance | None) -> P:
    """The virt-launcher pod as the VMI's *current* rules would schedule it.

    A launcher pod's affinity is fixed when KubeVirt creates it; a rule added to the running VM
    reaches the VMI spec but not the pod (seed 002), and only a restart or a live migration
    applies it. So the VMI's affinity replaces the pod's, and its nodeSelector is laid over the
    pod's (which also holds KubeVirt's own keys, e.g. kubevirt.io/schedulable).
    """
    if vmi is None or (vmi.spec.affinity is None and not vmi.spec.node_selector):
        return pod
    spec = pod.spec
    affinity = vmi.spec.affinity if vmi.spec.affinity is not None else spec.affinity
    selector = spec.node_selector
    if vmi.spec.node_selector:
        selector = {**(selector or {}), **vmi.spec.node_selector}
    new_spec = msgspec.structs.replace(spec, affinity=affinity, node_selector=selector)
    return msgspec.structs.replace(pod, spec=new_spec)


class MoveKind(enum.Enum):
    """How a virt-launcher pod's VM may be moved."""

    MIGRATE = "migrate"
    RESTART = "restart"
    STAY = "stay"


def restart_consented(vmi: VirtualMachineInstance) -> bool:
    """The VMI's owner lets the descheduler stop it to start it elsewhere."""
    return RESTART_CONSENT in vmi.metadata.annotations


def how_to_move(vmi: VirtualMachineInstance | None, default_strategy: str) -> tuple[MoveKind, str]:
    """Migrate; restart where the owner consented; else stay. With the reason the VM cannot
    migrate, in words (for the Event on the VMI, or the eviction's reason)."""
    if vmi is None:
        return MoveKind.STAY, "its VirtualMachineInstance is not known (yet)"
    how, why = _live_migration(vmi, default_strategy)
    if how is MoveKind.STAY and restart_consented(vmi):
        return MoveKind.RESTART, f"{why}; restarted elsewhere, as {RESTART_CONSENT} allows"
    return how, why


def _live_migration(vmi: VirtualMachineInstance, default_strategy: str) -> tuple[MoveKind, str]:
    strategy = vmi.spec.eviction_strategy or default_strategy
    migratable, why = vmi.live_migratable()
    if strategy == LIVE_MIGRATE:
        if migratable:
            return MoveKind.MIGRATE, ""
        return MoveKind.STAY, f"evictionStrategy LiveMigrate but it is not live-migratable: {why}"
    if strategy == LIVE_MIGRATE_IF_POSSIBLE and migratable:
        return MoveKind.MIGRATE, ""
    if strategy == LIVE_MIGRATE_IF_POSSIBLE:
        return MoveKind.STAY, f"evictionStrategy LiveMigrateIfPossible and not migratable: {why}"
    return MoveKind.STAY, f"evictionStrategy {strategy}: evicting would stop the VM"


class MigrationConfiguration(_ApiStruct, frozen=True):
    parallel_migrations_per_cluster: int | None = None
    parallel_outbound_migrations_per_node: int | None = None


class KubeVirtConfiguration(_ApiStruct, frozen=True):
    migrations: MigrationConfiguration = msgspec.field(default_factory=MigrationConfiguration)


class KubeVirtSpec(_ApiStruct, frozen=True):
    configuration: KubeVirtConfiguration = msgspec.field(default_factory=KubeVirtConfiguration)


class KubeVirtStatus(_ApiStruct, frozen=True):
    observed_kube_virt_version: str = ""


class KubeVirt(_Object, frozen=True):
    """The KubeVirt CR: the cluster's KubeVirt configuration and the version it runs."""

    spec: KubeVirtSpec = msgspec.field(default_factory=KubeVirtSpec)
    status: KubeVirtStatus = msgspec.field(default_factory=KubeVirtStatus)


_KUBEVIRT: Final = msgspec.json.Decoder(KubeVirt)
# The first release whose VirtualMachineInstanceMigration takes spec.addedNodeSelector.
ADDED_NODE_SELECTOR_SINCE: Final = (1, 5)


def decode_kubevirt(data: bytes | str) -> KubeVirt:
    return _KUBEVIRT.decode(data)


def migration_limits(
    kubevirt: KubeVirt | None, override: MigrationLimits | None
) -> MigrationLimits:
    """Our config's limits when set, else the KubeVirt CR's (KubeVirt's defaults for what it
    leaves out, or without a CR)."""
    if override is not None:
        return override
    configured = kubevirt.spec.configuration.migrations if kubevirt else MigrationConfiguration()
    # An explicit 0 is kept, never read as unset. KubeVirt's API types both limits as *uint32,
    # omitempty (kubevirt/api v1.9.0 core/v1/types.go, MigrationConfiguration: "Defaults to 5"
    # and "to 2" apply only to a nil pointer), so 0 is a value; virt-controller then starts a
    # migration only while fewer than the limit run (kubevirt/kubevirt
    # pkg/virt-controller/watch/migration/migration.go: `len(runningMigrations) >=
    # ParallelMigrationsPerCluster` waits), so with 0 none ever runs, and a migration we asked
    # for would only sit Pending.
    per_cluster = configured.parallel_migrations_per_cluster
    outbound = configured.parallel_outbound_migrations_per_node
    return MigrationLimits(
        per_cluster=PARALLEL_MIGRATIONS_PER_CLUSTER if per_cluster is None else per_cluster,
        outbound_per_node=PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE if outbound is None else outbound,
    )


def kubevirt_version(kubevirt: KubeVirt | None) -> tuple[int, int] | None:
    """(major, minor) of `status.observedKubeVirtVersion` ("v1.5.2", "v1.6.0-rc.1"), if known."""
    if kubevirt is None:
        return None
    parts = kubevirt.status.observed_kube_virt_version.lstrip("v").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def pins_targets(kubevirt: KubeVirt | None) -> bool:
    """Whether the cluster's KubeVirt takes a migration's addedNodeSelector."""
    version = kubevirt_version(kubevirt)
    return version is not None and version >= ADDED_NODE_SELECTOR_SINCE
