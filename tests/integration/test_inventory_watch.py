"""The node-labeller's vCenter watch against vcsim: two feeds (the VMs; everything else), each on
a session and a property collector of its own, delivered as one complete inventory first and
then as each feed's changes."""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pyVmomi import vim

from hostaffinity.node_labeller.inventory import HOST, VM, WATCHED_PROPERTIES
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher, UpdateBatch
from tests.e2e.harness import inventory
from tests.e2e.labeller_harness import relocate, session_keys
from tests.platform.vcsim import Vcsim, VcsimFactory


@asynccontextmanager
async def watching(vc: Vcsim) -> AsyncIterator[InventoryWatcher]:
    watcher = InventoryWatcher(vc.settings(), WATCHED_PROPERTIES)
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def next_batch(watcher: InventoryWatcher) -> UpdateBatch:
    return await asyncio.wait_for(watcher.batches.get(), 10)


def moids(si: vim.ServiceInstance, kind: type) -> set[str]:
    return {obj._moId for obj in inventory(si, kind)}


async def test_the_first_batch_is_the_whole_inventory_of_both_feeds_then_changes_follow(
    vcsim: VcsimFactory,
) -> None:
    vc = vcsim(hosts=3, vms=6)
    admin = vc.connect()
    before = session_keys(admin)
    async with watching(vc) as watcher:
        first = await next_batch(watcher)
        assert first.resync
        seen = {(u.obj_type, u.moid) for u in first.updates}
        assert {moid for kind, moid in seen if kind == VM} == moids(admin, vim.VirtualMachine)
        assert {moid for kind, moid in seen if kind == HOST} == moids(admin, vim.HostSystem)
        assert len(session_keys(admin) - before) == 2, "one vCenter session per feed"

        vm = inventory(admin, vim.VirtualMachine)[0]
        target = next(h for h in inventory(admin, vim.HostSystem) if h != vm.runtime.host)
        relocate(admin, vm.name, target.name)
        moved = False
        while not moved:
            batch = await next_batch(watcher)
            assert not batch.resync
            moved = any(
                u.moid == vm._moId and u.props.get("runtime.host") == target._moId
                for u in batch.updates
            )

        await asyncio.sleep(0.5)  # both feeds are in a long poll (2 s) now
        asked = time.monotonic()
        watcher.request_full_read()
        while not (batch := await next_batch(watcher)).resync:
            pass
        # The polls in flight were cancelled, not waited out.
        assert time.monotonic() - asked < 1.0
        assert {(u.obj_type, u.moid) for u in batch.updates} >= seen - {
            (kind, moid) for kind, moid in seen if kind == "Task"
        }
    # A stop cancels both long polls and logs both sessions out.
    assert session_keys(admin) == before


async def test_a_stop_ends_both_long_polls_at_once(vcsim: VcsimFactory) -> None:
    vc = vcsim(hosts=2, vms=2)
    watcher = InventoryWatcher(vc.settings(), WATCHED_PROPERTIES)
    task = asyncio.create_task(watcher.run())
    await next_batch(watcher)
    await asyncio.sleep(0.5)  # both feeds are in a long poll now
    started = time.monotonic()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert time.monotonic() - started < 1.5
