"""The fleet view a service follows: its install's `hostaffinity-fleet` bucket, which may not exist
yet (no hub), into the other installs' members by group; a bad value is left out, a deletion
forgets, and a new connection's replay replaces what was known."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
from nats.js.kv import KeyValue

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.fleet_view import follow_fleet_view
from hostaffinity.schema import (
    FLEET_BUCKET,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_key,
    workload_key,
)
from tests.e2e.harness import eventually
from tests.platform.nats import NatsServer


def summary(cluster: str, host: str, group: str = "web") -> bytes:
    placement = WorkloadPlacement(
        cluster=cluster,
        namespace="shop",
        kind="Deployment",
        name="web",
        fleet_group=group,
        replicas=[ReplicaPlacement(pod="web-0", host_name=host, host_id=f"uuid/{host}")],
    )
    return msgspec.json.encode(placement)


def hosts(members: FleetMembers) -> dict[str, list[str]]:
    return {h: sorted(m.cluster for m in ms) for h, ms in members.on_hosts("web").items()}


@contextlib.asynccontextmanager
async def following(
    bus: Bus, members: FleetMembers, on_change: Callable[[], None]
) -> AsyncIterator[None]:
    task = asyncio.create_task(
        follow_fleet_view(
            bus.js, members, link=bus.link_epoch, on_change=on_change, retry_seconds=0.2
        )
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


KEY = fleet_key("east", workload_key("shop", "Deployment", "web"))


async def test_the_view_appears_with_its_bucket_and_follows_it(bus: Bus) -> None:
    members = FleetMembers("me")
    changes: list[int] = []
    async with following(bus, members, lambda: changes.append(members.version)):
        await asyncio.sleep(0.5)  # no bucket yet: an empty view, and nothing fails
        assert members.groups() == []
        kv: KeyValue = await bus.js.create_key_value(bucket=FLEET_BUCKET, history=1)
        await kv.put(KEY, summary("east", "esx-1"))
        await kv.put("me.workload.shop.Deployment.web", summary("me", "esx-2"))
        await kv.put("east.node.n1", b"{}")  # the hub's topology copy: not a member
        await eventually(lambda: hosts(members) == {"esx-1": ["east"]}, "east's member")
        await kv.put(fleet_key("west", workload_key("shop", "Deployment", "web")), b"not json")
        await kv.put(KEY, summary("east", "esx-3"))  # a vMotion in east
        await eventually(lambda: hosts(members) == {"esx-3": ["east"]}, "the move")
        await kv.delete(KEY)
        await eventually(lambda: hosts(members) == {}, "the deletion")
    assert changes == sorted(changes)
    assert len(changes) == 3


async def test_a_new_connection_replays_the_bucket_and_forgets_what_it_lacks(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with nats_server.connection("setup") as setup:
        kv = await setup.js.create_key_value(bucket=FLEET_BUCKET, history=1)
        await kv.put(KEY, summary("east", "esx-1"))
    members = FleetMembers("me")
    async with nats_server.connection("reader") as bus, following(bus, members, lambda: None):
        await eventually(lambda: hosts(members) == {"esx-1": ["east"]}, "east's member")
        await nats_server.restart(keep_store=False)  # the bus lost its store: the view too
        async with nats_server.connection("setup") as setup:
            kv = await setup.js.create_key_value(bucket=FLEET_BUCKET, history=1)
            await kv.put(
                fleet_key("west", workload_key("shop", "Deployment", "web")),
                summary("west", "esx-2"),
            )
        await eventually(lambda: hosts(members) == {"esx-2": ["west"]}, "the replay", 20)
