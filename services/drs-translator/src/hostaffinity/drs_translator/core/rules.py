"""DRS rules and groups as plain values: what the planner wants and what vCenter holds.

One shape for both sides, so the diff compares like with like. How they are named is
`naming.py`'s.
"""

from dataclasses import dataclass, field
from typing import Final, Literal

from hostaffinity.schema import DrsObjectKind, DrsOwnership, DrsRecordState

# Why a rule was not sent, or is not ours to touch (drs.rule.conflict's `reason`).
ConflictReason = Literal[
    "too-few-hosts",
    "together-and-apart",
    "no-common-host",
    "not-translatable",
    "prefix-without-record",
    "refused",
]
RULE_KINDS: Final[frozenset[DrsObjectKind]] = frozenset(
    {"vm-anti-affinity", "vm-affinity", "vm-host"}
)


@dataclass(frozen=True, slots=True)
class DrsObject:
    """A DRS rule (VM-VM, VM-Host) or group (VM, host) of one vSphere cluster.

    `vms` and `hosts` are sorted managed object ids. `key` is vCenter's rule key (rules only,
    known once read back); `enabled` is what vCenter says, or false for a rule we hold so that a
    host can enter maintenance mode, `held_because` then saying why. `pods`, `reason` and
    `held_because` say who asked and why; like `key`, they are not part of what DRS enforces,
    so `same_content` ignores them.
    """

    name: str
    kind: DrsObjectKind
    cluster_moid: str
    vms: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    vm_group: str = ""
    host_group: str = ""
    mandatory: bool = False
    enabled: bool = True
    key: int | None = None
    pods: tuple[str, ...] = field(default=(), compare=False)
    reason: str = field(default="", compare=False)
    held_because: str = field(default="", compare=False)

    @property
    def is_rule(self) -> bool:
        return self.kind in RULE_KINDS

    def same_content(self, other: "DrsObject") -> bool:
        """Whether DRS would enforce the same thing for both."""
        return (
            self.kind == other.kind
            and self.vms == other.vms
            and self.hosts == other.hosts
            and self.vm_group == other.vm_group
            and self.host_group == other.host_group
            and self.mandatory == other.mandatory
            and self.enabled == other.enabled
        )

    def record(
        self, vcenter: str, *, state: DrsRecordState, recorded_at: str, applied_at: str = ""
    ) -> DrsOwnership:
        """The ownership record for this object."""
        return DrsOwnership(
            vcenter=vcenter,
            cluster_moid=self.cluster_moid,
            name=self.name,
            kind=self.kind,
            vms=list(self.vms),
            hosts=list(self.hosts),
            vm_group=self.vm_group,
            host_group=self.host_group,
            mandatory=self.mandatory,
            pods=list(self.pods),
            reason=self.reason,
            state=state,
            recorded_at=recorded_at,
            applied_at=applied_at,
            held_because=self.held_because,
        )


def from_record(record: DrsOwnership) -> DrsObject:
    """What a record says we asked vCenter for (a held rule: disabled)."""
    return DrsObject(
        name=record.name,
        kind=record.kind,
        cluster_moid=record.cluster_moid,
        vms=tuple(record.vms),
        hosts=tuple(record.hosts),
        vm_group=record.vm_group,
        host_group=record.host_group,
        mandatory=record.mandatory,
        pods=tuple(record.pods),
        reason=record.reason,
        enabled=not record.held_because,
        held_because=record.held_because,
    )
