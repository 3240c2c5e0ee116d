"""The VirtualMachine behind a virt-launcher pod `explain` asks about: whether the placement its
template asks for waits for a restart.

The pod's controller is its VMI, the VMI's is its VirtualMachine (a VMIRS's VMIs have none, and
a VMI started on its own neither); two reads, only for a virt-launcher pod. The comparison is
the descheduler's (hostaffinity.affinity.vm_placement), so `explain` says what its
`PlacementAwaitsRestart` Event says.
"""

from __future__ import annotations

from typing import Final

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.affinity.model import ApiStruct, ObjectMeta, OwnerReference
from hostaffinity.affinity.vm_placement import VmPlacement, VmSpec, VmStatus, awaiting_restart
from hostaffinity.cli.connections import open_api
from hostaffinity.runtime.kube.client import KubeClient, ResourceRef
from hostaffinity.runtime.process.config import KubernetesSettings
from hostaffinity.schema.reports import PlacementChange, VmRestartView

VMI_KIND: Final = "VirtualMachineInstance"
VM_KIND: Final = "VirtualMachine"


class _Vmi(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VmPlacement = msgspec.field(default_factory=VmPlacement)


class _Vm(ApiStruct, frozen=True):
    spec: VmSpec = msgspec.field(default_factory=VmSpec)
    status: VmStatus = msgspec.field(default_factory=VmStatus)


def _controller(owners: list[OwnerReference], kind: str) -> str | None:
    return next((ref.name for ref in owners if ref.controller and ref.kind == kind), None)


async def _get(client: KubeClient, resource: str, namespace: str, name: str) -> bytes | None:
    """The object, or None where it is gone or KubeVirt is not installed (404) or not readable
    by this identity (403): the explanation then goes on without it."""
    ref = ResourceRef("kubevirt.io", "v1", resource, namespace)
    try:
        body: bytes = await client.request("GET", ref.path(name))
    except ApiException as error:
        if error.status in (403, 404):
            return None
        raise
    return body


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


async def read_vm_restart(
    settings: KubernetesSettings, namespace: str, owners: list[OwnerReference]
) -> VmRestartView | None:
    """For a pod owned by a VMI that a VirtualMachine controls: the placement fields the VM's
    template changed and its VMI does not have while KubeVirt waits for a restart; else None."""
    vmi_name = _controller(owners, VMI_KIND)
    if vmi_name is None:
        return None
    async with open_api(settings) as client:
        vmi_body = await _get(client, "virtualmachineinstances", namespace, vmi_name)
        if vmi_body is None:
            return None
        vmi = msgspec.json.decode(vmi_body, type=_Vmi)
        vm_name = _controller(vmi.metadata.owner_references, VM_KIND)
        vm_body = None if vm_name is None else await _get(
            client, "virtualmachines", namespace, vm_name
        )  # fmt: skip
    if vm_body is None:
        return None
    vm = msgspec.json.decode(vm_body, type=_Vm)
    template = vm.spec.template.spec
    fields = awaiting_restart(template, vmi.spec, vm.status.conditions)
    if not fields:
        return None
    wanted, running = template.fields(), vmi.spec.fields()
    changes = [PlacementChange(field=f, template=_json(wanted[f]), running=_json(running[f]))
               for f in fields]  # fmt: skip
    return VmRestartView(vm=f"{namespace}/{vm_name}", changes=changes)
