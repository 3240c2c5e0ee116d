"""The fleet rule leases of two installs wanting the same rule, on the hub and buses as they ship
(tests/platform/fleet_hub.py), each install's drs-translator reaching the hub through its own
bus's leaf link: exactly one holds it; it lets go when it no longer wants it and the other
takes it at its next round; while the hub is away nobody holds it, the holder counting itself
one no longer than the hub would; a holder cut off from the hub is taken over once its key
expired; an install's next run takes its own lease back at once."""

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hostaffinity.drs_translator.fleet_leases import FleetLeases, LeaseSubject
from hostaffinity.runtime.bus.hub_leases import HubLeases
from hostaffinity.schema import FLEET_LEASES_BUCKET, HUB_DOMAIN
from tests.e2e.harness import eventually
from tests.platform.fleet_hub import FleetHub, lease_holder
from tests.platform.nats_cluster import NatsCluster

MAX_AGE = 3.0
KEY = "vc-uuid.domain-c1.hostaffinity-fleet-anti-0123456789ab"
SUBJECT = LeaseSubject(
    "vc-uuid", "domain-c1", "payments-db", "hostaffinity-fleet-anti-0123456789ab"
)


@dataclass
class Fleet:
    hub: FleetHub
    installs: dict[str, NatsCluster]
    stack: contextlib.AsyncExitStack
    woken: list[str]

    async def leases(self, name: str, holder: str | None = None) -> FleetLeases:
        """A drs-translator's leases, on a connection of its own to the install's bus."""
        bus = await self.stack.enter_async_context(self.installs[name].connection("drs-translator"))
        store = HubLeases(bus.nc, HUB_DOMAIN, FLEET_LEASES_BUCKET, timeout=0.5)
        return FleetLeases(
            store, holder or f"cluster-{name}", name, wake=lambda: self.woken.append(name)
        )

    async def east_first(self) -> tuple[FleetLeases, FleetLeases]:
        """Both installs wanting the rule, east asking first, then west."""
        east, west = await self.leases("east"), await self.leases("west")
        east.want("vc", {KEY: SUBJECT})
        west.want("vc", {KEY: SUBJECT})
        await east.tick()
        await west.tick()
        return east, west

    async def holder_on_hub(self) -> str | None:
        return await lease_holder(self.installs["west"], KEY)

    def linked(self) -> bool:
        return all(install.leaf_connected() for install in self.installs.values())


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    hub = FleetHub(tmp_path / "hub")
    installs = {
        name: hub.join(name, name, tmp_path / name, cuttable=name == "east")
        for name in ("east", "west")
    }
    async with contextlib.AsyncExitStack() as stack:
        await hub.start()
        stack.push_async_callback(hub.close)
        for install in installs.values():
            await install.start()
            stack.push_async_callback(install.stop)
        await hub.provision(lease_max_age_seconds=MAX_AGE)
        state = Fleet(hub, installs, stack, [])
        await eventually(state.linked, "leaves", 20)
        yield state


async def test_one_install_holds_the_lease_and_hands_it_over_when_it_no_longer_wants_it(
    fleet: Fleet,
) -> None:
    east, west = await fleet.east_first()
    assert (east.held(), west.held()) == ([KEY], [])
    assert await fleet.holder_on_hub() == "cluster-east"
    assert fleet.woken == ["east"]
    for _ in range(3):  # renewals keep it; the other keeps asking in vain
        await east.tick()
        await west.tick()
    assert (east.held(), west.held()) == ([KEY], [])
    east.want("vc", {})
    await east.tick()  # lets go: deletes the key
    assert east.held() == []
    await west.tick()
    assert west.held() == [KEY]
    assert await fleet.holder_on_hub() == "cluster-west"


async def test_while_the_hub_is_away_nobody_holds_and_afterwards_exactly_one_does(
    fleet: Fleet,
) -> None:
    east, west = await fleet.east_first()
    renewed = time.monotonic()
    await fleet.hub.stop()
    await east.tick()
    await west.tick()
    assert west.held() == []
    assert east.holds(KEY)  # within two thirds of the max age of its last renewal
    await eventually(lambda: not east.holds(KEY), "east's lease lapsing", MAX_AGE)
    lapsed = time.monotonic() - renewed
    assert 2 * MAX_AGE / 3 - 0.1 <= lapsed < MAX_AGE  # before the hub could free the key
    await fleet.hub.start()
    await eventually(fleet.linked, "leaves back", 20)
    deadline = time.monotonic() + 4 * MAX_AGE
    while not (east.held() or west.held()):
        assert time.monotonic() < deadline, "nobody holds the lease again"
        await east.tick()
        await west.tick()
    for _ in range(3):
        await east.tick()
        await west.tick()
        assert len(east.held() + west.held()) == 1


async def test_a_holder_cut_off_from_the_hub_is_taken_over_once_its_lease_expired(
    fleet: Fleet,
) -> None:
    east, west = await fleet.east_first()
    cut = time.monotonic()
    await fleet.hub.links["east"].cut()  # east's bus up, its way to the hub away
    deadline = cut + 4 * MAX_AGE
    while not west.held():
        assert time.monotonic() < deadline, "west never took the expired lease"
        await east.tick()
        await west.tick()
    assert time.monotonic() - cut >= MAX_AGE * 0.9  # not before the hub freed it
    assert not east.holds(KEY)
    assert await fleet.holder_on_hub() == "cluster-west"
    await fleet.hub.links["east"].restore()
    await eventually(fleet.installs["east"].leaf_connected, "east back", 20)
    for _ in range(3):  # its renewal is refused: it knows it lost the lease
        await east.tick()
        await west.tick()
    assert east.held() == []
    assert west.held() == [KEY]


async def test_the_next_run_of_the_same_install_takes_its_own_lease_back_at_once(
    fleet: Fleet,
) -> None:
    """A crash leaves the key on the hub until it expires; the same install, restarted, need
    not wait for that."""
    first = await fleet.leases("east")
    first.want("vc", {KEY: SUBJECT})
    await first.tick()
    again, west = await fleet.leases("east"), await fleet.leases("west")
    again.want("vc", {KEY: SUBJECT})
    west.want("vc", {KEY: SUBJECT})
    await west.tick()
    await again.tick()
    assert (again.held(), west.held()) == ([KEY], [])
