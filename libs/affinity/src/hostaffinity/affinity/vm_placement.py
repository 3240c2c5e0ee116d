"""A KubeVirt VM's placement, and whether a change to it waits for the VM's next start.

Under KubeVirt's default `Stage` rollout strategy a change to a VirtualMachine's template reaches
its running VMI only when the VM restarts; KubeVirt then sets the VM's `RestartRequired`
condition (kubevirt/kubevirt pkg/virt-controller/watch/vm/vm.go, the RestartRequired condition;
api/core/v1 VirtualMachineConditionType). A new affinity or nodeSelector stays unapplied
meanwhile, and the VM runs where the old rules put it. The descheduler reports such VMs and
`hostaffinity explain` shows them, both from this one comparison.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from hostaffinity.affinity.model import Affinity, ApiStruct

RESTART_REQUIRED: Final = "RestartRequired"


class VmCondition(ApiStruct, frozen=True):
    type: str = ""
    status: str = ""
    message: str = ""


class VmPlacement(ApiStruct, frozen=True):
    """The placement fields of a VMI spec, or of a VM's template spec."""

    affinity: Affinity | None = None
    node_selector: dict[str, str] | None = None

    def fields(self) -> dict[str, object]:
        """Each placement field by its API name, as JSON-ready values (None: not set)."""
        return {
            "affinity": msgspec.to_builtins(self.affinity) if self.affinity else None,
            "nodeSelector": dict(self.node_selector) if self.node_selector else None,
        }


class VmTemplate(ApiStruct, frozen=True):
    spec: VmPlacement = msgspec.field(default_factory=VmPlacement)


class VmSpec(ApiStruct, frozen=True):
    template: VmTemplate = msgspec.field(default_factory=VmTemplate)


class VmStatus(ApiStruct, frozen=True):
    conditions: list[VmCondition] = msgspec.field(default_factory=list)


def awaiting_restart(
    template: VmPlacement, running: VmPlacement, conditions: Iterable[VmCondition]
) -> list[str]:
    """The placement fields (API names) the VM's template changed and its running VMI does not
    have, while KubeVirt holds them for a restart; empty otherwise."""
    if not any(c.type == RESTART_REQUIRED and c.status == "True" for c in conditions):
        return []
    wanted, live = template.fields(), running.fields()
    return [name for name in wanted if wanted[name] != live[name]]
