"""Which nodes one vCenter update sends to the planner: those it can concern, however many
Nodes the cluster has (a vMotion at 5,000 nodes must not plan every node not placed yet)."""

import asyncio
from typing import Any

from hostaffinity.node_labeller.core.inventory import ObjectUpdate
from hostaffinity.node_labeller.core.matching import swap_uuid_byte_order
from hostaffinity.node_labeller.core.nodes import (
    Node,
    NodeMeta,
    NodeSpec,
    NodeStatus,
    NodeSystemInfo,
)
from hostaffinity.node_labeller.core.reconcile import PlannerSettings, reconcile_node
from hostaffinity.node_labeller.labeller import Labeller
from hostaffinity.node_labeller.metrics import LabellerMetrics
from hostaffinity.node_labeller.vcenter_watch import UpdateBatch
from hostaffinity.runtime.process.workqueue import SWEEP_WINDOW
from hostaffinity.schema import EventFactory, TopologySnapshot
from tests.platform.builders.node_labeller import inventory_updates, vm_enter

EVENTS = EventFactory("node-labeller")

VCENTER = "vc-1"
UUID = "42370000-0000-0000-0000-000000000001"
SETTINGS = PlannerSettings(fallback="vm-name")
# Nodes no VM matches (bare metal, another provider's): never placed.
UNPLACED = 2_000


class StaticNodes:
    """The informer's cache as the labeller reads it, already synced."""

    def __init__(self, nodes: list[Node]) -> None:
        self.cache: dict[str, Node] = {node.name: node for node in nodes}
        self.synced = asyncio.Event()
        self.synced.set()


def node(name: str, system_uuid: str = "", provider_uuid: str = "") -> Node:
    return Node(
        metadata=NodeMeta(name=name),
        spec=NodeSpec(provider_id=f"vsphere://{provider_uuid}" if provider_uuid else ""),
        status=NodeStatus(node_info=NodeSystemInfo(system_uuid=system_uuid)),
    )


def bare_metal(index: int) -> Node:
    return node(f"metal-{index}", system_uuid=f"00000000-0000-0000-0001-{index:012d}")


async def working_labeller(nodes: StaticNodes) -> Labeller:
    """A labeller that has read vCenter (VM vm-1 of node worker-1 on host-1) and every Node,
    with worker-1 placed as the KV says; nothing queued. Only `on_inventory` and `on_node` are
    called, which queue keys and write nothing."""
    unused: Any = None
    labeller = Labeller(
        SETTINGS,
        unused,
        unused,
        unused,
        unused,
        nodes,
        vcenters=[VCENTER],
        event_factory=EVENTS,
        metrics=LabellerMetrics(),
    )
    updates = inventory_updates(("vm-1", "worker-1", UUID, "host-1"))
    labeller.on_inventory(UpdateBatch(VCENTER, updates, resync=True, received_at=0.0))
    placed = reconcile_node(
        nodes.cache["worker-1"],
        labeller.state.inventories,
        None,
        SETTINGS,
        now="t0",
        version=1,
        events=EVENTS,
    ).placement
    assert placed is not None
    labeller.load_topology(TopologySnapshot(nodes={"worker-1": placed}, hosts={}))
    for name in nodes.cache:
        labeller.on_node(name)
    await queued(labeller)
    return labeller


async def queued(labeller: Labeller) -> set[str]:
    """The keys waiting for the planner (taken off the queue)."""
    keys = set()
    while not labeller.queue.idle():
        key = await labeller.queue.get()
        labeller.queue.done(key)
        keys.add(key)
    return keys


def batch(*updates: ObjectUpdate) -> UpdateBatch:
    return UpdateBatch(VCENTER, list(updates), resync=False, received_at=1.0)


def the_cluster() -> StaticNodes:
    return StaticNodes(
        [node("worker-1", provider_uuid=UUID)] + [bare_metal(i) for i in range(UNPLACED)]
    )


async def test_a_vmotion_plans_the_moved_vms_node_alone_among_thousands_unplaced() -> None:
    labeller = await working_labeller(the_cluster())

    moved = ObjectUpdate("modify", "VirtualMachine", "vm-1", {"runtime.host": "host-2"})
    labeller.on_inventory(batch(moved))

    assert await queued(labeller) == {"node.worker-1"}


async def test_a_new_vm_is_matched_to_the_unplaced_node_it_belongs_to() -> None:
    labeller = await working_labeller(the_cluster())
    # The other-endian form of bare metal 7's systemUUID is the VM's BIOS UUID.
    uuid = swap_uuid_byte_order(bare_metal(7).status.node_info.system_uuid)

    labeller.on_inventory(batch(vm_enter("vm-9", "some-vm", uuid, "host-1")))

    assert await queued(labeller) == {"node.metal-7"}


async def test_a_clone_of_a_placed_nodes_vm_makes_its_node_planned_again() -> None:
    labeller = await working_labeller(the_cluster())

    labeller.on_inventory(batch(vm_enter("vm-2", "clone", UUID, "host-2")))

    assert await queued(labeller) == {"node.worker-1"}


async def test_a_vm_giving_up_a_name_two_vms_shared_replans_the_node_of_that_name() -> None:
    twins = inventory_updates(("vm-7", "metal-3", "", "host-1"), ("vm-8", "metal-3", "", "host-2"))
    labeller = await working_labeller(the_cluster())
    labeller.on_inventory(batch(*twins[-2:]))
    assert await queued(labeller) == {"node.metal-3"}

    renamed = ObjectUpdate("modify", "VirtualMachine", "vm-8", {"name": "spare"})
    labeller.on_inventory(batch(renamed))

    assert await queued(labeller) == {"node.metal-3"}


async def test_a_deleted_node_is_no_longer_a_candidate() -> None:
    nodes = the_cluster()
    labeller = await working_labeller(nodes)
    del nodes.cache["metal-5"]
    labeller.on_node("metal-5")
    assert await queued(labeller) == {"node.metal-5"}

    labeller.on_inventory(batch(vm_enter("vm-9", "metal-5", "", "host-1")))

    assert await queued(labeller) == set()


async def test_a_resync_that_finds_a_vm_moved_plans_its_node_before_sweeping_the_rest() -> None:
    labeller = await working_labeller(the_cluster())

    read_again = inventory_updates(("vm-1", "worker-1", UUID, "host-2"))  # moved unseen
    labeller.on_inventory(UpdateBatch(VCENTER, read_again, resync=True, received_at=1.0))
    first = await labeller.queue.get()
    labeller.queue.done(first)

    assert first == "node.worker-1"
    assert "node.metal-1999" in await queued(labeller), "the rest is still swept"


async def test_a_change_during_a_resync_sweep_is_planned_before_the_rest_of_it() -> None:
    labeller = await working_labeller(the_cluster())
    labeller.on_inventory(
        UpdateBatch(
            VCENTER,
            inventory_updates(("vm-1", "worker-1", UUID, "host-1")),
            resync=True,
            received_at=1.0,
        )
    )

    moved = ObjectUpdate("modify", "VirtualMachine", "vm-1", {"runtime.host": "host-2"})
    labeller.on_inventory(batch(moved))
    order = []
    while not labeller.queue.idle():
        key = await labeller.queue.get()
        labeller.queue.done(key)
        order.append(key)

    assert order.index("node.worker-1") <= SWEEP_WINDOW
    assert len(order) > UNPLACED
