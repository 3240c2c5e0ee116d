"""Node → VM matching: providerID, systemUUID (both byte orders), fallback; never a guess."""

import pytest

from hostaffinity.node_labeller.core.inventory import VmFacts
from hostaffinity.node_labeller.core.matching import (
    Fallback,
    Matched,
    Unmatched,
    match_node,
    node_match_keys,
    swap_uuid_byte_order,
    vm_match_keys,
)
from hostaffinity.node_labeller.core.nodes import (
    Node,
    NodeMeta,
    NodeSpec,
    NodeStatus,
    NodeSystemInfo,
)
from tests.platform.builders.node_labeller import inventory_with

UUID_A = "4237f1ba-2b1c-8a21-9d3e-0123456789ab"
UUID_B = "42370000-1111-2222-3333-444455556666"
INVENTORY = inventory_with(
    ("vm-10", "worker-a", UUID_A, "host-1"),
    ("vm-11", "worker-b", UUID_B, "host-2"),
    ("vm-12", "clone-1", "42379999-0000-0000-0000-000000000001", "host-1"),
    ("vm-13", "clone-2", "42379999-0000-0000-0000-000000000001", "host-2"),
)
INVENTORIES = {"vc-1": INVENTORY}


def node(name: str, provider_id: str = "", system_uuid: str = "") -> Node:
    return Node(
        metadata=NodeMeta(name=name),
        spec=NodeSpec(provider_id=provider_id),
        status=NodeStatus(node_info=NodeSystemInfo(system_uuid=system_uuid)),
    )


def test_swapping_reverses_the_first_three_fields() -> None:
    assert swap_uuid_byte_order(UUID_A) == "baf13742-1c2b-218a-9d3e-0123456789ab"
    assert swap_uuid_byte_order(swap_uuid_byte_order(UUID_A)) == UUID_A


@pytest.mark.parametrize(
    ("candidate", "fallback", "expected"),
    [
        (
            node("x", provider_id=f"vsphere://{UUID_A.upper()}"),
            "none",
            Matched("vc-1", "vm-10", "providerID"),
        ),
        (node("x", system_uuid=UUID_B.upper()), "none", Matched("vc-1", "vm-11", "systemUUID")),
        (
            node("x", system_uuid=swap_uuid_byte_order(UUID_A).upper()),
            "none",
            Matched("vc-1", "vm-10", "systemUUID"),
        ),
        (node("worker-b"), "vm-name", Matched("vc-1", "vm-11", "vm-name")),
        (
            node("worker-b", provider_id="vsphere://42370000-dead-beef-0000-000000000000"),
            "vm-name",
            Matched("vc-1", "vm-11", "vm-name"),
        ),
    ],
    ids=["provider-id", "system-uuid", "system-uuid-byte-swapped", "fallback-name", "stale-id"],
)
def test_a_node_matches_exactly_one_vm(
    candidate: Node, fallback: Fallback, expected: Matched
) -> None:
    assert match_node(candidate, INVENTORIES, fallback) == expected
    vm = INVENTORY.vm(expected.vm_moid)
    assert vm is not None
    assert node_match_keys(candidate, fallback) & vm_match_keys(vm), "a change to it concerns x"


def test_a_guest_hostname_is_a_match_key_only_with_that_fallback() -> None:
    vm = VmFacts("vm-20", "vm-20", "", "", "host-1", guest_hostname="worker-g")

    assert node_match_keys(node("worker-g"), "guest-hostname") & vm_match_keys(vm)
    assert not node_match_keys(node("worker-g"), "vm-name") & vm_match_keys(vm)
    assert not node_match_keys(node("worker-g"), "none")


def test_a_duplicate_bios_uuid_is_reported_with_both_vms() -> None:
    result = match_node(
        node("x", provider_id="vsphere://42379999-0000-0000-0000-000000000001"), INVENTORIES, "none"
    )
    assert isinstance(result, Unmatched)
    assert result.candidates == (("vc-1", "vm-12"), ("vc-1", "vm-13"))
    assert "2 VMs share the BIOS UUID" in result.reason


def test_no_match_says_what_was_tried() -> None:
    result = match_node(node("worker-z"), INVENTORIES, "vm-name")
    assert result == Unmatched(
        "no VM in vCenter matches this node (tried providerID, systemUUID, vm-name)"
    )


def test_no_fallback_means_no_name_match() -> None:
    assert isinstance(match_node(node("worker-a"), INVENTORIES, "none"), Unmatched)


def test_one_bios_uuid_in_two_vcenters_is_reported_never_guessed() -> None:
    """Moids repeat across vCenters too: the candidates name theirs."""
    other = inventory_with(("vm-10", "worker-a-copy", UUID_A, "host-1"))
    result = match_node(
        node("worker-a", provider_id=f"vsphere://{UUID_A}"), {**INVENTORIES, "vc-2": other}, "none"
    )
    assert isinstance(result, Unmatched)
    assert result.candidates == (("vc-1", "vm-10"), ("vc-2", "vm-10"))
    assert "(vm-10 in vc-1, vm-10 in vc-2)" in result.reason


def test_a_vm_of_another_vcenter_matches_with_its_vcenter() -> None:
    other = inventory_with(("vm-10", "worker-c", "42371111-0000-0000-0000-000000000009", "host-1"))
    result = match_node(node("worker-c"), {**INVENTORIES, "vc-2": other}, "vm-name")
    assert result == Matched("vc-2", "vm-10", "vm-name")
