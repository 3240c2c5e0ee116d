"""KubeVirt: which virt-launcher pods move by live migration, and the migration limits.

A virt-launcher pod is never evicted by the descheduler: evicting it kills the VM. When its
VMI's `evictionStrategy` is LiveMigrate, or LiveMigrateIfPossible and the VMI reports the
LiveMigratable condition, the descheduler creates a VirtualMachineInstanceMigration instead;
otherwise it records an Event on the VMI saying why the VM was left in place.

Limits are KubeVirt's own defaults (kubevirt pkg/virt-config/virt-config.go:
ParallelMigrationsPerClusterDefault = 5, ParallelOutboundMigrationsPerNodeDefault = 2); the
migrations already in flight count against them.
"""

from __future__ import annotations

import enum
from typing import Annotated, Final, TypeVar

import msgspec

from hostaffinity.affinity.model import Affinity, ObjectMeta, Pod
from hostaffinity.affinity.model import ApiStruct as _ApiStruct

VIRT_LAUNCHER_LABEL: Final = "kubevirt.io"
VIRT_LAUNCHER_VALUE: Final = "virt-launcher"
VMI_KIND: Final = "VirtualMachineInstance"
LIVE_MIGRATE: Final = "LiveMigrate"
LIVE_MIGRATE_IF_POSSIBLE: Final = "LiveMigrateIfPossible"
FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
PARALLEL_MIGRATIONS_PER_CLUSTER: Final = 5
PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: Final = 2
P = TypeVar("P", bound=Pod)


class VmiCondition(_ApiStruct, frozen=True):
    type: str = ""
    status: str = ""
    message: str = ""


class VmiSpec(_ApiStruct, frozen=True):
    eviction_strategy: str | None = None
    affinity: Affinity | None = None
    node_selector: dict[str, str] | None = None


class VmiStatus(_ApiStruct, frozen=True):
    phase: str = ""
    node_name: str = ""
    conditions: list[VmiCondition] = msgspec.field(default_factory=list)


class VirtualMachineInstance(_ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VmiSpec = msgspec.field(default_factory=VmiSpec)
    status: VmiStatus = msgspec.field(default_factory=VmiStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def live_migratable(self) -> tuple[bool, str]:
        """The LiveMigratable condition, and its message when it is not True."""
        for condition in self.status.conditions:
            if condition.type == "LiveMigratable":
                return condition.status == "True", condition.message
        return False, "the VMI does not report the LiveMigratable condition"


class MigrationSpec(_ApiStruct, frozen=True):
    vmi_name: str = ""


class MigrationState(_ApiStruct, frozen=True):
    source_node: str = ""
    target_node: str = ""


class MigrationStatus(_ApiStruct, frozen=True):
    phase: str = ""
    migration_state: MigrationState | None = None


class VirtualMachineInstanceMigration(_ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: MigrationSpec = msgspec.field(default_factory=MigrationSpec)
    status: MigrationStatus = msgspec.field(default_factory=MigrationStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def in_flight(self) -> bool:
        return self.status.phase not in FINISHED_PHASES


_VMI: Final = msgspec.json.Decoder(VirtualMachineInstance)
_VMIM: Final = msgspec.json.Decoder(VirtualMachineInstanceMigration)


def decode_vmi(data: bytes | str) -> VirtualMachineInstance:
    return _VMI.decode(data)


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
    STAY = "stay"


def how_to_move(vmi: VirtualMachineInstance | None, default_strategy: str) -> tuple[MoveKind, str]:
    """Migrate, or stay with the reason in words (for the Event on the VMI)."""
    if vmi is None:
        return MoveKind.STAY, "its VirtualMachineInstance is not known (yet)"
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


class MigrationLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """KubeVirt's parallel migration limits, which the descheduler keeps to as well."""

    # 0 stops the descheduler from asking for migrations at all.
    per_cluster: Annotated[int, msgspec.Meta(ge=0)] = PARALLEL_MIGRATIONS_PER_CLUSTER
    outbound_per_node: Annotated[int, msgspec.Meta(ge=0)] = PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE
