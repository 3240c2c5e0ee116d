"""Matching a Kubernetes Node to its vCenter VM: providerID, then systemUUID, then a fallback.

Each step looks in every vCenter's inventory at once. Two VMs with the same BIOS UUID (a clone
that kept it, or one UUID in two vCenters) make a match ambiguous: we report the candidates and
never guess.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from hostaffinity.node_labeller.core.inventory import Inventory, VmFacts
from hostaffinity.node_labeller.core.nodes import Node

PROVIDER_PREFIX = "vsphere://"
Fallback = Literal["vm-name", "guest-hostname", "none"]
# A VM anywhere: (the vCenter's name, the VM's moid); moids repeat across vCenters.
VmRef = tuple[str, str]
# What a VM is looked up by: ("uuid", BIOS UUID), ("name", VM name), ("guest", guest hostname).
MatchKey = tuple[Literal["uuid", "name", "guest"], str]


@dataclass(frozen=True, slots=True)
class Matched:
    vcenter: str
    vm_moid: str
    matched_by: str


@dataclass(frozen=True, slots=True)
class Unmatched:
    reason: str
    candidates: tuple[VmRef, ...] = ()


def swap_uuid_byte_order(uuid: str) -> str:
    """The other-endian form of a UUID's first three fields.

    Older VM hardware versions report the SMBIOS system UUID with the first three fields
    byte-swapped relative to vCenter's `config.uuid`; the node's `systemUUID` can be either form.
    """
    parts = uuid.lower().split("-")
    if len(parts) != 5 or [len(p) for p in parts] != [8, 4, 4, 4, 12]:
        return uuid.lower()
    swapped = ["".join(reversed([p[i : i + 2] for i in range(0, len(p), 2)])) for p in parts[:3]]
    return "-".join([*swapped, *parts[3:]])


def match_node(
    node: Node, inventories: Mapping[str, Inventory], fallback: Fallback
) -> Matched | Unmatched:
    """Find the one VM this node runs in, in any of the vCenters (`inventories`, by name), or
    say precisely why there is not exactly one."""

    def everywhere(lookup: Callable[[Inventory], set[str]]) -> set[VmRef]:
        return {(vc, moid) for vc, inventory in inventories.items() for moid in lookup(inventory)}

    several = len(inventories) > 1
    uuid = _provider_uuid(node)
    if uuid is not None:
        by_uuid = everywhere(lambda inventory: inventory.vms_with_uuid(uuid))
        found = _exactly_one(by_uuid, "providerID", f"BIOS UUID {uuid}", several)
        if found is not None:
            return found
    system_uuid = node.status.node_info.system_uuid.lower()
    if system_uuid:
        candidates = everywhere(
            lambda inventory: inventory.vms_with_uuid(system_uuid)
            | inventory.vms_with_uuid(swap_uuid_byte_order(system_uuid))
        )
        found = _exactly_one(candidates, "systemUUID", f"BIOS UUID {system_uuid}", several)
        if found is not None:
            return found
    if fallback == "vm-name":
        by_name = everywhere(lambda inventory: inventory.vms_named(node.name))
        found = _exactly_one(by_name, "vm-name", f"VM name {node.name}", several)
    elif fallback == "guest-hostname":
        by_hostname = everywhere(lambda inventory: inventory.vms_with_guest_hostname(node.name))
        found = _exactly_one(by_hostname, "guest-hostname", f"guest hostname {node.name}", several)
    else:
        found = None
    if found is not None:
        return found
    tried = ["providerID", "systemUUID"] + ([fallback] if fallback != "none" else [])
    return Unmatched(reason=f"no VM in vCenter matches this node (tried {', '.join(tried)})")


def node_match_keys(node: Node, fallback: Fallback) -> frozenset[MatchKey]:
    """Every key `match_node` looks the node's VM up by: a VM holding none of them is no
    candidate, so a change to such a VM cannot change the node's match."""
    keys: set[MatchKey] = set()
    uuid = _provider_uuid(node)
    if uuid:
        keys.add(("uuid", uuid))
    system_uuid = node.status.node_info.system_uuid.lower()
    if system_uuid:
        keys.update((("uuid", system_uuid), ("uuid", swap_uuid_byte_order(system_uuid))))
    if fallback == "vm-name":
        keys.add(("name", node.name))
    elif fallback == "guest-hostname":
        keys.add(("guest", node.name))
    return frozenset(keys)


def vm_match_keys(vm: VmFacts) -> set[MatchKey]:
    """The keys `match_node` can find this VM by (the Inventory's indexes hold it under them)."""
    keys: set[MatchKey] = set()
    if vm.bios_uuid:
        keys.add(("uuid", vm.bios_uuid))
    if vm.name:
        keys.add(("name", vm.name))
    if vm.guest_hostname:
        keys.add(("guest", vm.guest_hostname))
    return keys


def _provider_uuid(node: Node) -> str | None:
    """The BIOS UUID in a `vsphere://` providerID; None for another provider's (or none)."""
    provider_id = node.spec.provider_id
    if not provider_id.startswith(PROVIDER_PREFIX):
        return None
    return provider_id[len(PROVIDER_PREFIX) :].strip("/").lower()


def _exactly_one(
    candidates: set[VmRef], how: str, what: str, several: bool
) -> Matched | Unmatched | None:
    """The one candidate; or, of several, the report (naming each one's vCenter when the
    labeller works with several vCenters)."""
    if not candidates:
        return None
    if len(candidates) > 1:
        listed = tuple(sorted(candidates))
        named = [f"{moid} in {vc}" if several else moid for vc, moid in listed]
        return Unmatched(
            reason=f"{len(listed)} VMs share the {what} ({', '.join(named)}); "
            "a cloned VM probably kept its BIOS UUID, so the node is left unlabelled",
            candidates=listed,
        )
    ((vcenter, moid),) = candidates
    return Matched(vcenter=vcenter, vm_moid=moid, matched_by=how)
