"""Builders for an Inventory shaped like vCenter's: datacenter → folder → cluster → hosts."""

from hostaffinity.node_labeller.core.inventory import Inventory, ObjectUpdate, PropertyValue


def enter(obj_type: str, moid: str, **props: PropertyValue) -> ObjectUpdate:
    return ObjectUpdate(
        "enter", obj_type, moid, {k.replace("__", "."): v for k, v in props.items()}
    )


def inventory_with(*vms: tuple[str, str, str, str | None]) -> Inventory:
    """Two hosts (host-1 'esx-1', host-2 'esx 2 (rack b)') in cluster C0 of DC0, and VMs
    given as (moid, name, bios uuid, host moid)."""
    inventory = Inventory()
    for update in inventory_updates(*vms):
        inventory.apply(update)
    return inventory


def inventory_updates(*vms: tuple[str, str, str, str | None]) -> list[ObjectUpdate]:
    """The updates of `inventory_with`'s inventory, as vCenter's first answer brings them."""
    return [
        enter("Datacenter", "datacenter-1", name="DC0", parent="group-d1"),
        enter("Folder", "group-h4", name="host", parent="datacenter-1"),
        enter("ClusterComputeResource", "domain-c7", name="C0", parent="group-h4"),
        enter("HostSystem", "host-1", name="esx-1", parent="domain-c7", **_up()),
        enter("HostSystem", "host-2", name="esx 2 (rack b)", parent="domain-c7", **_up()),
    ] + [vm_enter(*vm) for vm in vms]


def vm_enter(moid: str, name: str, uuid: str, host: str | None) -> ObjectUpdate:
    return enter(
        "VirtualMachine",
        moid,
        name=name,
        config__uuid=uuid,
        config__instanceUuid="5000" + uuid[4:],
        runtime__host=host,
    )


def _up() -> dict[str, PropertyValue]:
    return {"runtime__connectionState": "connected", "runtime__inMaintenanceMode": False}
