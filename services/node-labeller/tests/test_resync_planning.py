"""The resync's planning: which KV keys hold something other than what was written, and how a
marked key is rewritten (or deleted) without announcing a change that did not happen."""

import msgspec

from hostaffinity.node_labeller.core.inventory import Inventory
from hostaffinity.node_labeller.core.nodes import Node, NodeMeta
from hostaffinity.node_labeller.core.reconcile import (
    HostActions,
    PlannerSettings,
    forget_node,
    reconcile_host,
    reconcile_node,
    stale_keys,
)
from hostaffinity.node_labeller.labeller import HostIds
from hostaffinity.schema import EventFactory, NodePlacement, TopologySnapshot, Undecodable
from tests.platform.builders.node_labeller import inventory_with

EVENTS = EventFactory("node-labeller")

SETTINGS = PlannerSettings(fallback="vm-name")
VCENTER = "vc-1"
NOW = "2026-11-22T08:00:00.000000Z"
UUID = "42370000-0000-0000-0000-000000000001"


def placed(inventory: Inventory, name: str = "worker-1") -> tuple[Node, NodePlacement]:
    """A node as the labeller left it: placed, labelled and annotated."""
    first = reconcile_node(
        Node(metadata=NodeMeta(name=name)),
        {VCENTER: inventory},
        None,
        SETTINGS,
        now=NOW,
        version=1,
        events=EVENTS,
    )
    assert first.placement is not None
    assert first.label_patch is not None
    labels = {k: v for k, v in first.label_patch["labels"].items() if v is not None}
    notes = {k: v for k, v in first.label_patch["annotations"].items() if v is not None}
    return Node(metadata=NodeMeta(name=name, labels=labels, annotations=notes)), first.placement


def test_a_true_placement_under_a_stale_key_is_rewritten_silently_with_a_new_version() -> None:
    inventory = inventory_with(("vm-1", "worker-1", UUID, "host-1"))
    node, placement = placed(inventory)

    actions = reconcile_node(
        node,
        {VCENTER: inventory},
        placement,
        SETTINGS,
        now="later",
        version=7,
        events=EVENTS,
        kv_stale=True,
    )

    assert actions.placement == msgspec.structs.replace(placement, observed_at="later", version=7)
    assert (actions.label_patch, actions.events, actions.delete_placement) == (None, [], False)


def test_without_the_mark_nothing_is_written() -> None:
    inventory = inventory_with(("vm-1", "worker-1", UUID, "host-1"))
    node, placement = placed(inventory)

    actions = reconcile_node(
        node, {VCENTER: inventory}, placement, SETTINGS, now="later", version=7, events=EVENTS
    )

    assert actions.placement is None


def test_a_stale_key_of_an_unmatched_node_is_deleted() -> None:
    inventory = inventory_with(("vm-1", "worker-1", UUID, "host-1"))
    ghost = Node(metadata=NodeMeta(name="ghost"))

    actions = reconcile_node(
        ghost,
        {VCENTER: inventory},
        None,
        SETTINGS,
        now=NOW,
        version=2,
        events=EVENTS,
        kv_stale=True,
    )

    assert actions.delete_placement
    assert actions.placement is None


def test_a_node_kubernetes_no_longer_has_loses_its_key() -> None:
    inventory = inventory_with(("vm-1", "worker-1", UUID, "host-1"))
    _, placement = placed(inventory)

    assert forget_node("worker-1", placement, kv_stale=False).delete_placement
    assert forget_node("worker-1", None, kv_stale=True).delete_placement
    assert not forget_node("worker-1", None, kv_stale=False).delete_placement


def test_host_records_follow_the_inventory() -> None:
    inventory = inventory_with()
    written = reconcile_host("host-2", VCENTER, inventory, None, kv_stale=False).put
    assert written is not None
    assert (written.name, written.cluster_name) == ("esx 2 (rack b)", "C0")
    assert written.label.startswith("esx-2-rack-b-")

    assert reconcile_host("host-2", VCENTER, inventory, written, kv_stale=False) == HostActions()
    assert reconcile_host("host-2", VCENTER, inventory, written, kv_stale=True) == HostActions(
        put=written
    )
    assert reconcile_host("host-9", VCENTER, inventory, written, kv_stale=False) == HostActions(
        delete=True
    )
    assert reconcile_host("host-9", VCENTER, inventory, None, kv_stale=False) == HostActions()


def test_stale_keys_are_every_difference_between_the_kv_and_what_was_written() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", UUID, "host-1"),
        ("vm-2", "worker-2", UUID.replace("1", "2"), "host-1"),
        ("vm-3", "worker-3", UUID.replace("1", "3"), "host-2"),
    )
    written = {name: placed(inventory, name)[1] for name in ("worker-1", "worker-2", "worker-3")}
    host = reconcile_host("host-1", VCENTER, inventory, None, kv_stale=False).put
    assert host is not None
    false = msgspec.structs.replace(written["worker-2"], host_moid="host-2", host_name="esx 2")
    stored = TopologySnapshot(
        nodes={
            "worker-1": written["worker-1"],  # as written
            "worker-2": false,  # well-formed but false
            "gone": written["worker-1"],  # a key the labeller never wrote (or deleted)
            "junk": Undecodable("expected object, got str"),
        },  # worker-3's key is missing
        hosts={"host-1": Undecodable("expected bool")},
    )

    stale = stale_keys(stored, written, {"host-1": host})

    assert stale == {"node.worker-2", "node.gone", "node.junk", "node.worker-3", "host.host-1"}


def test_a_host_record_equal_to_what_was_written_is_not_stale() -> None:
    host = reconcile_host("host-1", VCENTER, inventory_with(), None, kv_stale=False).put
    assert host is not None
    stored = TopologySnapshot(nodes={}, hosts={"host-1": host})

    assert stale_keys(stored, {}, {"host-1": host}) == set()


def test_host_keys_stay_apart_across_vcenters_and_bare_with_one() -> None:
    """`host-12` exists in both vCenters: with several, the key names the vCenter; with one,
    the documented `host.<moid>` layout stays; a key of the other layout is nobody's."""
    one, two = HostIds(("vc-1",)), HostIds(("vc-1", "vc.b"))
    assert one.of("vc-1", "host-12") == "host-12"
    assert {two.of("vc-1", "host-12"), two.of("vc.b", "host-12")} == {
        "vc-1.host-12",
        "vc.b.host-12",
    }
    assert two.parse("vc.b.host-12") == ("vc.b", "host-12")
    assert one.parse("host-12") == ("vc-1", "host-12")
    assert two.parse("host-12") is None
    assert one.parse("vc-1.host-12") is None
    host = reconcile_host("host-1", "vc.b", inventory_with(), None, kv_stale=False).put
    assert host is not None
    assert host.vcenter == "vc.b"


def test_a_placement_recorded_without_the_vcenter_uuid_gets_it_silently() -> None:
    """Placements written before the labeller read vCenter's instance UUID (the fleet's host
    identity) are completed once, with no event and no label change."""
    inventory = inventory_with(("vm-1", "worker-1", UUID, "host-1"))
    node, placement = placed(inventory)
    inventory.vcenter_uuid = "5c2d1b8e-0a4f-4e39-9b7d-6f1e2a3b4c5d"

    actions = reconcile_node(
        node, {VCENTER: inventory}, placement, SETTINGS, now="later", version=7, events=EVENTS
    )

    assert actions.placement is not None
    assert actions.placement.vcenter_uuid == inventory.vcenter_uuid
    assert (actions.label_patch, actions.events, actions.delete_placement) == (None, [], False)
