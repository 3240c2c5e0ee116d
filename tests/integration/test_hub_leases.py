"""A key on the fleet hub, written from two installs' own buses through the hub's JetStream
domain: only one may create it, a write that did not see the last one is refused, the bucket's
max age frees a key nobody renews, and a deleted key may be created again."""

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from hostaffinity.runtime.bus.hub_leases import HubLeases, LeaseTaken
from tests.e2e.harness import eventually
from tests.platform.nats_leaf import DomainNatsServer, hub_server, install_server

BUCKET = "leases-under-test"
TTL_SECONDS = 2.0


async def _client(server: DomainNatsServer) -> Client:
    nc = Client()
    await nc.connect(server.url)
    return nc


@pytest.fixture
async def two_installs(tmp_path: Path) -> AsyncIterator[tuple[HubLeases, HubLeases]]:
    hub = hub_server(tmp_path)
    await hub.start()
    east, west = install_server(tmp_path, "east", hub), install_server(tmp_path, "west", hub)
    clients: list[Client] = []
    try:
        for server in (east, west):
            await server.start()
        await eventually(lambda: east.leaf_connected() and west.leaf_connected(), "leaf nodes", 10)
        admin = await _client(hub)
        clients.append(admin)
        await admin.jetstream().create_key_value(bucket=BUCKET, history=1, ttl=TTL_SECONDS)
        for server in (east, west):
            clients.append(await _client(server))
        yield HubLeases(clients[1], "hub", BUCKET), HubLeases(clients[2], "hub", BUCKET)
    finally:
        for nc in clients:
            await nc.close()
        for server in (east, west, hub):
            await server.stop()


async def test_only_one_install_creates_the_key_and_only_its_holder_renews_it(
    two_installs: tuple[HubLeases, HubLeases],
) -> None:
    east, west = two_installs
    assert await east.max_age_seconds() == TTL_SECONDS
    free = await east.read("rule")
    assert free.value is None
    held = await east.write("rule", b"east", free.revision)
    with pytest.raises(LeaseTaken):
        await west.write("rule", b"west", free.revision)  # it read the key free, too late
    seen = await west.read("rule")
    assert (seen.value, seen.revision) == (b"east", held)
    renewed = await east.write("rule", b"east again", held)
    with pytest.raises(LeaseTaken):
        await west.write("rule", b"west", held)  # a stale revision
    assert (await west.read("rule")).value == b"east again"
    await east.delete("rule", renewed)
    gone = await west.read("rule")
    assert gone.value is None
    await west.write("rule", b"west", gone.revision)
    assert (await east.read("rule")).value == b"west"


async def test_a_key_nobody_renews_is_freed_by_the_bucket_s_max_age(
    two_installs: tuple[HubLeases, HubLeases],
) -> None:
    east, west = two_installs
    await east.write("rule", b"east", 0)
    started = time.monotonic()
    while (await west.read("rule")).value is not None:
        assert time.monotonic() - started < 4 * TTL_SECONDS, "never expired"
        await asyncio.sleep(0.1)
    assert time.monotonic() - started >= TTL_SECONDS * 0.9
    after = await west.read("rule")
    await west.write("rule", b"west", after.revision)
