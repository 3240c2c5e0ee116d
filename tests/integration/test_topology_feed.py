"""`follow_topology` on a real nats-server: what a service sees of the topology bucket across a
cut connection and a server that came back without its store, and that it stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import Bootstrapped, HostChange, NodeChange, TopologyChange
from hostaffinity.runtime.bus.topology_feed import (
    INFERRED_REVISION,
    PROBE_SECONDS,
    follow_topology,
)
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import TOPOLOGY_BUCKET, NodePlacement
from tests.e2e.harness import bus_rebuilt_with, eventually
from tests.platform.bus_values import ESXI_HOST, OTHER_HOST
from tests.platform.bus_values import node_placement as placement
from tests.platform.nats import NatsServer, message_tasks
from tests.platform.tcp_proxy import TcpProxy

RECOVERY_SECONDS = 10.0


class Seen:
    """What the feed reported, in order, and whether it last said live (`Bootstrapped`) or
    lost."""

    def __init__(self) -> None:
        self.changes: list[TopologyChange] = []
        self.live = False

    def change(self, change: TopologyChange) -> None:
        self.changes.append(change)
        self.live = self.live or isinstance(change, Bootstrapped)

    def lost(self) -> None:
        self.live = False

    def nodes(self) -> dict[str, NodePlacement]:
        """The placements as a service folding every change would hold them."""
        held: dict[str, NodePlacement] = {}
        for change in self.changes:
            if isinstance(change, NodeChange):
                if change.placement is None:
                    held.pop(change.node, None)
                else:
                    held[change.node] = change.placement
        return held

    def hosts(self) -> set[str]:
        held: set[str] = set()
        for change in self.changes:
            if isinstance(change, HostChange):
                (held.add if change.host else held.discard)(change.moid)
        return held


@contextlib.asynccontextmanager
async def following(reader: Bus, probe_seconds: float = PROBE_SECONDS) -> AsyncIterator[Seen]:
    """The feed on `reader`'s connection, live before the block and cancelled after it."""
    seen = Seen()
    feed = asyncio.create_task(
        follow_topology(
            await reader.topology(),
            seen.change,
            link=reader.link_epoch,
            on_lost=seen.lost,
            probe_seconds=probe_seconds,
        )
    )
    try:
        await eventually(lambda: seen.live, "the first replay")
        yield seen
    finally:
        feed.cancel()
        await asyncio.wait({feed}, timeout=5)
        assert feed.cancelled(), "the feed did not stop when cancelled"


async def two_nodes_on_two_hosts(bus: Bus) -> None:
    store = await bus.topology()
    await store.put_node(placement("worker-a", ESXI_HOST.moid, version=1))
    await store.put_node(placement("worker-b", OTHER_HOST.moid, version=1))
    await store.put_host(ESXI_HOST)
    await store.put_host(OTHER_HOST)


async def test_what_a_store_lost_in_an_outage_no_longer_holds_is_reported_deleted_once(
    nats_server: NatsServer, bus: Bus
) -> None:
    await two_nodes_on_two_hosts(bus)
    async with nats_server.connection("reader") as reader, following(reader) as seen:
        assert seen.nodes().keys() == {"worker-a", "worker-b"}
        before = len(seen.changes)

        await bus_rebuilt_with(
            nats_server, [placement("worker-a", ESXI_HOST.moid, version=1)], [ESXI_HOST]
        )
        await eventually(
            lambda: seen.nodes().keys() == {"worker-a"} and seen.live,
            "worker-b dropped after the reconnect",
            RECOVERY_SECONDS,
        )
        after = seen.changes[before:]
    inferred = [
        NodeChange(node="worker-b", placement=None, revision=INFERRED_REVISION),
        HostChange(moid="host-12", host=None, revision=INFERRED_REVISION),
        Bootstrapped(),
    ]
    at = after.index(inferred[0])
    assert after[at : at + 3] == inferred, "deletions are reported just before the replay ends"
    assert after.count(inferred[0]) == after.count(inferred[1]) == 1
    assert seen.hosts() == {"host-11"}


async def test_a_node_deleted_while_the_connection_was_cut_is_gone_once_it_is_back(
    nats_server: NatsServer, bus: Bus
) -> None:
    """The deletion is in the store but was never delivered on the cut connection: the feed says
    lost while cut, and the watch opened on the new connection replays it."""
    await two_nodes_on_two_hosts(bus)
    proxy = TcpProxy("127.0.0.1", nats_server.port)
    await proxy.start()
    settings = NatsSettings(servers=[f"nats://127.0.0.1:{proxy.port}"])
    reader = await Bus.connect(settings, name="reader", reconnect_wait_seconds=1)
    try:
        async with following(reader) as seen:
            await proxy.refuse()
            await eventually(lambda: not seen.live, "lost while the connection is cut")
            store = await bus.topology()
            await store.delete_node("worker-b")
            await store.delete_host(OTHER_HOST.moid)
            await proxy.accept()

            await eventually(
                lambda: seen.nodes().keys() == {"worker-a"} and seen.live,
                "worker-b gone after the reconnect",
                RECOVERY_SECONDS,
            )
            assert seen.hosts() == {"host-11"}
    finally:
        await reader.close()
        await proxy.stop()


async def pause_every_watch(bus: Bus) -> None:
    """Every consumer of the topology bucket stops delivering while it goes on sending its
    heartbeats, so nats-py sees a live watch (tried: no change came in 30 s). A consumer on a
    stalled replica looks the same to a client."""
    stream = f"KV_{TOPOLOGY_BUCKET}"
    until = (datetime.now(UTC) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    consumers = await bus.js.consumers_info(stream)
    assert consumers, "no watch to pause"
    for consumer in consumers:
        await bus.js.pause_consumer(stream, consumer.name, until)


async def test_a_watch_that_stops_delivering_on_a_live_connection_is_reopened(
    nats_server: NatsServer, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    await two_nodes_on_two_hosts(bus)
    async with (
        nats_server.connection("reader") as reader,
        following(reader, probe_seconds=0.5) as seen,
    ):
        await pause_every_watch(bus)
        store = await bus.topology()
        await store.delete_node("worker-b")

        await eventually(
            lambda: seen.nodes().keys() == {"worker-a"} and seen.live,
            "the deletion, through a watch opened again",
            RECOVERY_SECONDS,
        )
    # The four writes were revisions 1-4 and the deletion 5: the log says where it stood.
    assert "topology watch stalled at revision 4, the bucket at 5" in caplog.text


async def test_a_quiet_watch_is_left_alone(nats_server: NatsServer, bus: Bus) -> None:
    """Nothing written, nothing owed: the probes never reopen a watch that has read it all."""
    await two_nodes_on_two_hosts(bus)
    async with (
        nats_server.connection("reader") as reader,
        following(reader, probe_seconds=0.1) as seen,
    ):
        replays = seen.changes.count(Bootstrapped())
        await asyncio.sleep(1.0)
        assert seen.changes.count(Bootstrapped()) == replays


async def test_cancelled_it_stops_and_leaves_no_watch_behind(
    nats_server: NatsServer, bus: Bus
) -> None:
    await two_nodes_on_two_hosts(bus)
    async with nats_server.connection("reader") as reader:
        await reader.topology()  # a first request starts the connection's reply subscription
        before = message_tasks()
        async with following(reader):
            assert message_tasks() != before
        # The connection lives on: only stopping the watch ends its message task.
        await eventually(lambda: message_tasks() == before, "the watch's message task gone", 2)
