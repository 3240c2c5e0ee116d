"""The node-labeller's periodic resync: the KV and labels are repaired without a vCenter change.

Someone (a bug, an operator with `nats kv put`) writes garbage, a wrong-typed value and a false
placement into the topology KV, and leaves the key of a node that no longer exists: the extender
trusts the KV, so each must be put right within one resync interval, with no `vm.moved` for a
move that never happened. A recurring warning becomes one Event whose count rises.
"""

import msgspec

from hostaffinity.node_labeller.config import LabellerSettings
from hostaffinity.node_labeller.labeller import Labeller
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import TOPOLOGY_BUCKET, VmMoved, node_key
from tests.e2e.harness import default_events
from tests.e2e.labeller_harness import (
    LabellerParts,
    eventually,
    node_object,
    stream_events,
)

NODES = [f"node-{i}" for i in range(1, 5)]
RESYNC_SECONDS = 1.0


async def a_full_resync_after(labeller: Labeller) -> None:
    """Until a resync that *started* after now has finished and its repairs are applied; one
    in progress now may have read the KV before the caller's writes."""
    target = labeller.resyncs + 2
    await eventually(
        lambda: labeller.resyncs >= target and labeller.idle(),
        "one full resync interval",
        within=10 * RESYNC_SECONDS,
    )


async def test_garbage_false_and_orphaned_kv_values_are_repaired_within_one_resync(
    parts: LabellerParts, bus: Bus
) -> None:
    vc, _ = parts.vcenter(vms=4, nodes=NODES)
    async with parts.labeller(
        vc, labeller=LabellerSettings(resync_seconds=RESYNC_SECONDS)
    ) as replica:
        store = await bus.topology()
        raw = await bus.js.key_value(TOPOLOGY_BUCKET)
        truth = {node: await store.get_node(node) for node in NODES}
        true_node_3 = truth["node-3"]
        assert true_node_3 is not None
        events_before = await stream_events(bus)

        await raw.put(node_key("node-1"), b"{not json")
        await raw.put(node_key("node-2"), b'{"node": "node-2", "version": "seven"}')
        false = msgspec.structs.replace(
            true_node_3, host_moid="host-999", host_name="DC0_C0_H9", host_label="DC0_C0_H9"
        )
        await store.put_node(false)
        await store.put_node(msgspec.structs.replace(true_node_3, node="deleted-while-away"))
        await a_full_resync_after(replica.labeller)

        for node in NODES:
            repaired = await store.get_node(node)
            assert repaired is not None, node
            expected = truth[node]
            assert expected is not None
            assert repaired.host_name == expected.host_name, node
            assert repaired.vm_moid == expected.vm_moid, node
        assert await store.get_node("deleted-while-away") is None
        new_events = (await stream_events(bus))[len(events_before) :]
        assert not [e for e in new_events if isinstance(e, VmMoved)], "no move happened"


async def test_a_deleted_nodes_kv_key_is_removed(parts: LabellerParts, bus: Bus) -> None:
    vc, _ = parts.vcenter(vms=4, nodes=NODES)
    async with parts.labeller(
        vc, labeller=LabellerSettings(resync_seconds=RESYNC_SECONDS)
    ) as replica:
        store = await bus.topology()
        assert await store.get_node("node-4") is not None

        parts.kube.delete("v1", "nodes", "node-4")

        await a_full_resync_after(replica.labeller)
        assert await store.get_node("node-4") is None
        assert await store.get_node("node-3") is not None


async def test_a_recurring_warning_is_one_event_whose_count_rises(parts: LabellerParts) -> None:
    vc, _ = parts.vcenter(vms=2, nodes=["node-1"])
    parts.kube.seed(node_object("ghost"))
    async with parts.labeller(
        vc, labeller=LabellerSettings(resync_seconds=RESYNC_SECONDS)
    ) as replica:
        for _ in range(3):
            await a_full_resync_after(replica.labeller)

        [warning] = [
            e for e in await default_events(parts.kube) if e["involvedObject"]["name"] == "ghost"
        ]
        assert warning["reason"] == "NodeUnmatched"
        assert warning["count"] >= 4  # the first labelling and at least three resyncs
