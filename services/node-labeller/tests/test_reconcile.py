"""reconcile_node: labels follow the VM, only our keys are touched, events match the change."""

from hostaffinity.node_labeller.core.inventory import Inventory
from hostaffinity.node_labeller.core.nodes import Node, NodeMeta
from hostaffinity.node_labeller.core.reconcile import NodeActions, PlannerSettings, reconcile_node
from hostaffinity.schema import (
    ANNOTATION_ESXI_HOST_NAME,
    LABEL_ESXI_HOST,
    LABEL_LEGACY_HOST,
    EventFactory,
    NodeLabelled,
    NodePlaced,
    NodePlacement,
    NodeUnmatched,
    VmMoved,
)
from tests.platform.builders.node_labeller import enter, inventory_with

EVENTS = EventFactory("node-labeller")

SETTINGS = PlannerSettings(fallback="vm-name")
VCENTER = "vc-1"
NOW = "2026-11-22T08:00:00.000000Z"


def node(name: str, labels: dict[str, str] | None = None) -> Node:
    return Node(metadata=NodeMeta(name=name, labels=labels or {}))


def run(
    subject: Node, inventory: Inventory, previous: NodePlacement | None = None, version: int = 1
) -> NodeActions:
    return reconcile_node(
        subject, {VCENTER: inventory}, previous, SETTINGS, now=NOW, version=version, events=EVENTS
    )


def apply_patch(subject: Node, actions: NodeActions) -> Node:
    labels = dict(subject.metadata.labels)
    for key, value in (actions.label_patch or {}).get("labels", {}).items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return node(subject.name, labels)


def test_a_new_node_is_placed_labelled_and_announced() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-1")
    )
    actions = run(node("worker-1", {"team": "a"}), inventory)
    assert actions.placement is not None
    assert (actions.placement.host_moid, actions.placement.cluster_name) == ("host-1", "C0")
    assert actions.placement.datacenter == "DC0"
    assert actions.label_patch == {
        "labels": {
            "hostaffinity.io/esxi-host": "esx-1",
            "hostaffinity.io/vsphere-cluster": "C0",
            "hostaffinity.io/datacenter": "DC0",
            "alpha.cna.vmware.com/host": "esx-1",
        },
        "annotations": {"hostaffinity.io/vm": "vm-1"},
    }
    assert [type(e) for e in actions.events] == [NodePlaced, NodeLabelled]
    assert not actions.warnings


def test_a_moved_vm_relabels_and_emits_vm_moved() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-1")
    )
    first = run(node("worker-1"), inventory)
    assert first.placement is not None
    labelled = apply_patch(node("worker-1"), first)
    inventory.apply(enter("VirtualMachine", "vm-1", runtime__host="host-2"))
    moved = run(labelled, inventory, previous=first.placement, version=2)
    assert moved.placement is not None
    assert moved.placement.version == 2
    assert moved.label_patch is not None
    assert moved.label_patch["labels"][LABEL_ESXI_HOST] == moved.placement.host_label
    kinds = [type(e) for e in moved.events]
    assert kinds == [VmMoved, NodeLabelled]
    event = moved.events[0]
    assert isinstance(event, VmMoved)
    assert (event.from_host_moid, event.to_host_moid) == ("host-1", "host-2")


def test_an_unchanged_node_needs_nothing() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-1")
    )
    first = run(node("worker-1"), inventory)
    labelled = apply_patch(node("worker-1"), first)
    labelled = Node(
        metadata=NodeMeta(
            name="worker-1",
            labels=labelled.metadata.labels,
            annotations={"hostaffinity.io/vm": "vm-1"},
        )
    )
    again = run(labelled, inventory, previous=first.placement, version=2)
    assert (again.placement, again.label_patch, again.events) == (None, None, [])


def test_a_hand_edited_label_is_put_back_and_others_are_untouched() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-1")
    )
    first = run(node("worker-1"), inventory)
    edited = dict(apply_patch(node("worker-1"), first).metadata.labels)
    edited[LABEL_ESXI_HOST] = "somewhere-else"
    edited["team"] = "b"
    again = run(node("worker-1", edited), inventory, previous=first.placement, version=2)
    assert again.label_patch == {
        "labels": {LABEL_ESXI_HOST: "esx-1"},
        "annotations": {"hostaffinity.io/vm": "vm-1"},
    }
    assert again.placement is None


def test_an_invalid_host_name_gets_a_derived_value_an_annotation_and_a_warning() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-2")
    )
    actions = run(node("worker-1"), inventory)
    assert actions.label_patch is not None
    value = actions.label_patch["labels"][LABEL_ESXI_HOST]
    assert value is not None
    assert value.startswith("esx-2-rack-b-")
    assert actions.label_patch["annotations"][ANNOTATION_ESXI_HOST_NAME] == "esx 2 (rack b)"
    assert [w.reason for w in actions.warnings] == ["EsxiHostNameNotALabelValue"]


def test_an_unmatched_node_loses_our_labels_and_is_reported() -> None:
    inventory = inventory_with()
    labels = {LABEL_ESXI_HOST: "esx-1", LABEL_LEGACY_HOST: "esx-1", "team": "a"}
    actions = run(node("worker-9", labels), inventory)
    assert actions.label_patch == {"labels": {LABEL_ESXI_HOST: None, LABEL_LEGACY_HOST: None}}
    assert [type(e) for e in actions.events] == [NodeUnmatched]
    assert [w.reason for w in actions.warnings] == ["NodeUnmatched"]


def test_a_vm_without_a_host_removes_labels_and_warns() -> None:
    inventory = inventory_with(("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", None))
    actions = run(node("worker-1", {LABEL_ESXI_HOST: "esx-1"}), inventory)
    assert actions.label_patch == {"labels": {LABEL_ESXI_HOST: None}}
    assert [w.reason for w in actions.warnings] == ["VmHasNoHost"]
    assert actions.placement is None


def test_a_host_in_maintenance_still_labels_truthfully_and_warns() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-1")
    )
    inventory.apply(enter("HostSystem", "host-1", runtime__inMaintenanceMode=True))
    actions = run(node("worker-1"), inventory)
    assert actions.label_patch is not None
    assert actions.label_patch["labels"][LABEL_ESXI_HOST] == "esx-1"
    assert [w.reason for w in actions.warnings] == ["EsxiHostInMaintenance"]


def test_event_ids_repeat_for_the_same_fact() -> None:
    inventory = inventory_with(
        ("vm-1", "worker-1", "42370000-0000-0000-0000-000000000001", "host-1")
    )
    assert [e.id for e in run(node("worker-1"), inventory).events] == [
        e.id for e in run(node("worker-1"), inventory).events
    ]
