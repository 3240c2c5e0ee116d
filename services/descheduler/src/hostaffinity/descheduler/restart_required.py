"""VirtualMachines whose new placement waits for a restart: said, since nothing else says it.

Under KubeVirt's default `Stage` rollout strategy a change to a VM's template reaches its
running VMI only when the VM restarts; KubeVirt marks the VM RestartRequired and moves on. A
new affinity or nodeSelector -- say, one that keeps two replicas on different ESXi hosts -- then
stays unapplied while the VM runs where the old rules put it, and the descheduler, which judges
the VMI, sees nothing to repair. So each such VM gets one Warning Event per change naming the
fields, and `hostaffinity_descheduler_vms_awaiting_restart` counts them (for an alert).
"""

from __future__ import annotations

from opentelemetry.metrics import Observation

from hostaffinity.descheduler.core.kubevirt import (
    VirtualMachine,
    VirtualMachineInstance,
    placement_awaiting_restart,
)
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.metrics import METER
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.runtime.process.observed import observe_latest

REASON = "PlacementAwaitsRestart"


class PlacementsAwaitingRestart:
    """Reports each VM whose template's placement its running VMI does not have yet."""

    def __init__(self, state: ClusterState, events: EventRecorder) -> None:
        self._state = state
        self._events = events
        self._reported: dict[str, str] = {}
        observe_latest(
            METER,
            "hostaffinity_descheduler_vms_awaiting_restart",
            lambda: [Observation(len(self.waiting()))],
            description="VirtualMachines whose new placement waits for a restart (RestartRequired)",
        )

    def waiting(self) -> dict[str, str]:
        """`namespace/name` of each such VM -> the fields waiting."""
        state = self._state
        found = {
            key: placement_awaiting_restart(vm, state.vmis.get(key))
            for key, vm in state.vms.items()
        }
        return {key: fields for key, fields in found.items() if fields}

    async def vmi_changed(self, vmi: VirtualMachineInstance) -> None:
        """A VMI arrived or changed: its VM is judged again (the informers list VMs and VMIs in
        either order, so a VM seen before its VMI had nothing to compare with yet)."""
        vm = self._state.vms.get(vmi.key)
        if vm is not None:
            await self.vm_changed(vm)

    async def vm_changed(self, vm: VirtualMachine) -> None:
        """One Event per VM and set of waiting fields."""
        fields = placement_awaiting_restart(vm, self._state.vmis.get(vm.key))
        if not fields:
            self._reported.pop(vm.key, None)
            return
        if self._reported.get(vm.key) == fields:
            return
        self._reported[vm.key] = fields
        meta = vm.metadata
        await self._events.record(
            ObjectRef("VirtualMachine", meta.name, meta.uid, meta.namespace, "kubevirt.io/v1"),
            REASON,
            f"The template's {fields} differs from the running VMI's and KubeVirt applies it "
            "only at the next start (RestartRequired): until then the VM runs where the old "
            "rules put it. Restart the VM, or use the LiveUpdate rollout strategy.",
        )
