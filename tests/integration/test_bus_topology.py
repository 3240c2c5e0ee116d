"""The topology bucket against a real nats-server: typed values, and the bootstrap watch."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import (
    ONE_SHOT_INACTIVE_SECONDS,
    Bootstrapped,
    HostChange,
    NodeChange,
    TopologyChange,
    TopologyWatch,
)
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.runtime.bus.layout import BusLayout
from hostaffinity.schema import (
    DLQ_STREAM,
    EVENTS_STREAM,
    TOPOLOGY_BUCKET,
    DeadLetter,
    NodePlacement,
    TopologySnapshot,
    Undecodable,
    dlq_subject,
    node_key,
)
from tests.platform.bus_values import ESXI_HOST
from tests.platform.bus_values import node_placement as placement
from tests.platform.nats import NatsServer, message_tasks

WAIT_SECONDS = 5.0


@pytest.fixture
async def reader(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A second connection, as another service would have."""
    async with nats_server.connection("reader") as other:
        yield other


async def next_change(watch: TopologyWatch) -> TopologyChange:
    async with asyncio.timeout(WAIT_SECONDS):
        return await anext(watch)


async def test_watch_yields_initial_values_then_bootstrapped_then_live_changes(
    bus: Bus, reader: Bus
) -> None:
    writer = await bus.provision()
    # A node name with dots: the watch must cover `node.>`, not `node.*`.
    first = placement("worker-1.k8s.example.com", "host-11", version=1)
    await writer.put_node(first)
    await writer.put_host(ESXI_HOST)

    async with (await reader.topology()).watch() as watch:
        initial = {await next_change(watch), await next_change(watch)}
        assert initial == {
            NodeChange(node=first.node, placement=first, revision=1),
            HostChange(moid="host-11", host=ESXI_HOST, revision=2),
        }
        assert await next_change(watch) == Bootstrapped()

        moved = placement("worker-1.k8s.example.com", "host-12", version=2)
        await writer.put_node(moved)
        assert await next_change(watch) == NodeChange(node=moved.node, placement=moved, revision=3)

        await writer.delete_node(moved.node)
        assert await next_change(watch) == NodeChange(node=moved.node, placement=None, revision=4)


async def test_watch_of_an_empty_bucket_is_bootstrapped_at_once(bus: Bus) -> None:
    async with (await bus.provision()).watch() as watch:
        assert await next_change(watch) == Bootstrapped()


async def test_value_that_does_not_decode_is_skipped_by_the_watch(bus: Bus) -> None:
    store = await bus.provision()
    raw = await bus.js.key_value(TOPOLOGY_BUCKET)
    await raw.put(node_key("broken"), b'{"node": "broken"}')
    # Found by tests/integration/test_message_fuzz.py: not msgspec's own errors, and once not
    # caught by the watch, whose task then ended.
    await raw.put(node_key("invalid-utf8"), b'{"node": "\xff"}')
    await raw.put(node_key("deep"), b'{"a":' * 20_000 + b"1" + b"}" * 20_000)
    good = placement("worker-2", "host-11", version=1)
    await store.put_node(good)

    async with store.watch() as watch:
        assert await next_change(watch) == NodeChange(node="worker-2", placement=good, revision=4)
        assert await next_change(watch) == Bootstrapped()


async def test_a_service_s_watch_parks_what_it_cannot_decode_once_with_its_reason(
    bus: Bus,
) -> None:
    await bus.provision()
    raw = await bus.js.key_value(TOPOLOGY_BUCKET)
    await raw.put(node_key("broken"), b'{"node": "broken"}')
    good = placement("worker-2", "host-11", version=1)
    store = await bus.topology(parked_as="descheduler")
    await store.put_node(good)

    for _ in range(2):  # a second watch (a restart) meets the same revision: stored once
        async with store.watch() as watch:
            assert await next_change(watch) == NodeChange(
                node="worker-2", placement=good, revision=2
            )
            assert await next_change(watch) == Bootstrapped()

    assert (await bus.js.stream_info(DLQ_STREAM)).state.messages == 1
    stored = await bus.js.get_last_msg(DLQ_STREAM, dlq_subject("descheduler"))
    letter = msgspec.json.decode(stored.data, type=DeadLetter)
    assert letter.subject == f"$KV.{TOPOLOGY_BUCKET}.{node_key('broken')}"
    assert letter.payload == b'{"node": "broken"}'
    assert letter.reason.startswith("undecodable value: ")
    assert letter.service == "descheduler"


async def test_snapshot_has_every_live_key_undecodable_ones_included(bus: Bus) -> None:
    store = await bus.provision()
    raw = await bus.js.key_value(TOPOLOGY_BUCKET)
    good = placement("worker-1.k8s.example.com", "host-11", version=1)
    await store.put_node(good)
    await store.put_node(placement("deleted", "host-11", version=1))
    await store.delete_node("deleted")
    await raw.put(node_key("garbage"), b"not json {")
    await raw.put(node_key("wrong-types"), b'{"node": 1}')
    await raw.put("host.host-12", b"[]")
    await raw.put("host.host-13", b'{"moid": "\xff"}')
    await store.put_host(ESXI_HOST)

    snapshot = await store.snapshot()

    assert snapshot.nodes.keys() == {good.node, "garbage", "wrong-types"}
    assert isinstance(snapshot.hosts.pop("host-13"), Undecodable)
    await store.delete_host("host-13")
    assert snapshot.nodes[good.node] == good
    assert isinstance(snapshot.nodes["garbage"], Undecodable)
    assert isinstance(snapshot.nodes["wrong-types"], Undecodable)
    assert snapshot.hosts["host-11"] == ESXI_HOST
    assert isinstance(snapshot.hosts["host-12"], Undecodable)
    assert await (await bus.provision()).snapshot() == snapshot  # repeatable
    empty = TopologySnapshot(nodes={}, hosts={})
    for key in (good.node, "garbage", "wrong-types"):
        await store.delete_node(key)
    for moid in ("host-11", "host-12"):
        await store.delete_host(moid)
    assert await store.snapshot() == empty


async def until_bootstrapped(watch: TopologyWatch) -> list[TopologyChange]:
    """The changes a watch yields before `Bootstrapped`."""
    changes = []
    while not isinstance(change := await next_change(watch), Bootstrapped):
        changes.append(change)
    return changes


async def test_watch_and_snapshot_wait_for_values_delivered_after_the_api_reply(
    bus: Bus, lagging_reader: Bus
) -> None:
    """nats-py ends its initial values on consumer_info's `num_pending == 0` when no delivery has
    been read yet; a reply that overtakes the deliveries made that a bootstrap with no values."""
    store = await bus.provision()
    written = {placement(f"worker-{i}", "host-11", version=1) for i in range(20)}
    for each in written:
        await store.put_node(each)
    reader = await lagging_reader.topology()

    async with reader.watch() as watch:
        before = await until_bootstrapped(watch)
    assert {change.placement for change in before if isinstance(change, NodeChange)} == written

    snapshot = await reader.snapshot()
    assert set(snapshot.nodes.values()) == written


STRESS_NODES = 2_000
STRESS_ROUNDS = 5


async def test_watch_started_during_writes_has_every_earlier_value_when_bootstrapped(
    bus: Bus, reader: Bus
) -> None:
    """A writer keeps moving nodes while watches start: at `Bootstrapped`, each node's view is at
    least the version acknowledged before the watch began, and no node is missing."""
    store = await bus.provision()
    await asyncio.gather(
        *(store.put_node(placement(f"worker-{i}", "host-0", 0)) for i in range(STRESS_NODES))
    )
    acked = {f"worker-{i}": 0 for i in range(STRESS_NODES)}
    stop = asyncio.Event()

    async def write() -> None:
        version = 0
        while True:
            version += 1
            for i in range(STRESS_NODES):
                if stop.is_set():
                    return
                node = f"worker-{i}"
                await store.put_node(placement(node, f"host-{version % 4}", version=version))
                acked[node] = version

    reader_store = await reader.topology()
    writer = asyncio.create_task(write())
    try:
        for _ in range(STRESS_ROUNDS):
            await asyncio.sleep(0.05)
            floor = dict(acked)
            async with reader_store.watch() as watch:
                changes = await until_bootstrapped(watch)
            snapshot = await reader_store.snapshot()
            assert not writer.done(), "the writes went on while the watch started"

            seen: dict[str, int] = {}
            for change in changes:
                assert isinstance(change, NodeChange)
                assert change.placement is not None
                seen[change.node] = change.placement.version
            revisions = [change.revision for change in changes if isinstance(change, NodeChange)]
            assert revisions == sorted(revisions), "delivered in stream order"
            assert seen.keys() == floor.keys()
            assert all(seen[node] >= floor[node] for node in floor)
            assert snapshot.nodes.keys() == floor.keys()
            assert all(
                isinstance(got := snapshot.nodes[node], NodePlacement)
                and got.version >= floor[node]
                for node in floor
            )
    finally:
        stop.set()
        await writer


async def test_watches_cancelled_while_starting_or_stopped_at_once_leave_no_task(
    bus: Bus, reader: Bus
) -> None:
    """A reconnect or a lost Lease cancels watch starts at any point; the connection lives on,
    so what a start made must be gone without waiting for it to close."""
    store = await bus.provision()
    for i in range(50):
        await store.put_node(placement(f"worker-{i}", "host-11", version=1))
    reader_store = await reader.topology()
    before = message_tasks()

    for delay in [step * 0.0002 for step in range(50)]:  # across a start's round trips
        watch = reader_store.watch()
        start = asyncio.create_task(watch.__aenter__())
        await asyncio.sleep(delay)
        start.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await start
            await watch.__aexit__(None, None, None)
    for _ in range(10):
        async with reader_store.watch():
            pass

    await asyncio.sleep(0.2)
    assert message_tasks() == before


async def test_get_returns_the_typed_value_and_none_once_deleted(bus: Bus) -> None:
    store = await bus.provision()
    stored = placement("worker-3", "host-11", version=7)
    await store.put_node(stored)
    await store.put_host(ESXI_HOST)

    assert await store.get_node("worker-3") == stored
    assert await store.get_host("host-11") == ESXI_HOST

    await store.delete_node("worker-3")
    await store.delete_host("host-11")
    assert await store.get_node("worker-3") is None
    assert await store.get_host("host-11") is None
    assert await store.get_node("never-written") is None


async def test_layout_is_idempotent_and_updates_changed_settings_in_place(bus: Bus) -> None:
    store = await bus.provision()
    stored = placement("worker-4", "host-11", version=1)
    await store.put_node(stored)
    await bus.provision()

    changed = BusLayout(events_max_age_seconds=3600.0, topology_history=9)
    again = await bus.provision(changed)

    assert (await bus.js.stream_info(EVENTS_STREAM)).config.max_age == 3600.0
    raw = await bus.js.key_value(TOPOLOGY_BUCKET)
    assert (await raw.status()).history == 9
    assert await again.get_node("worker-4") == stored


async def test_one_shot_reads_leave_no_consumer_behind_for_long(bus: Bus) -> None:
    """A snapshot (and `live_entries`) reads through an ordered consumer; nats-py leaves a
    stopped watch's consumer on the server for its inactive threshold (5 minutes by default),
    so a read a second (a
    `hostaffinity status` in a watch loop, the fault campaign's probe) reached the topology
    stream's cap of 256 consumers in four minutes, and then no service could watch the
    bucket. A one-shot read's consumer goes within seconds of the read."""
    store = await bus.provision()
    await store.put_host(ESXI_HOST)
    stream = f"KV_{TOPOLOGY_BUCKET}"
    kv = await bus.js.key_value(TOPOLOGY_BUCKET)

    for _ in range(5):
        assert (await store.snapshot()).hosts
        assert await live_entries(kv)  # the fleet reads' and the CLI's way

    async def consumers() -> int:
        return (await bus.js.stream_info(stream)).state.consumer_count

    async with asyncio.timeout(ONE_SHOT_INACTIVE_SECONDS + 10):
        left = await consumers()
        while left:  # the server expires them on its own timer: nothing to wait on but it
            await asyncio.sleep(0.5)
            left = await consumers()
