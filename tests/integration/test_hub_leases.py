"""A key on the fleet hub, written from two installs' own buses through the hub's JetStream
domain, on the hub and buses as they ship (leaf links, TLS, each install's drs-translator with
its own nkey): only one may create it, a write that did not see the last one is refused, the
bucket's max age (set by `hostaffinity fleet provision`) frees a key nobody renews, and a
deleted key may be created again."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostaffinity.runtime.bus.hub_leases import HubLeases, LeaseTaken
from hostaffinity.schema import FLEET_LEASES_BUCKET, HUB_DOMAIN
from tests.e2e.harness import eventually
from tests.platform.fleet_hub import FleetHub

TTL_SECONDS = 2.0


@pytest.fixture
async def two_installs(tmp_path: Path) -> AsyncIterator[tuple[HubLeases, HubLeases]]:
    hub = FleetHub(tmp_path / "hub")
    east, west = (hub.join(name, name, tmp_path / name) for name in ("east", "west"))
    async with contextlib.AsyncExitStack() as stack:
        await hub.start()
        stack.push_async_callback(hub.close)
        for install in (east, west):
            await install.start()
            stack.push_async_callback(install.stop)
        await hub.provision(lease_max_age_seconds=TTL_SECONDS)
        await eventually(lambda: east.leaf_connected() and west.leaf_connected(), "leaves", 20)
        leases = []
        for install in (east, west):
            bus = await stack.enter_async_context(install.connection("drs-translator"))
            leases.append(HubLeases(bus.nc, HUB_DOMAIN, FLEET_LEASES_BUCKET))
        yield leases[0], leases[1]


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
