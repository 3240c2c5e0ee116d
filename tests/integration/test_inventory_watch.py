"""The node-labeller's vCenter watch against vcsim: two feeds (the VMs; everything else), each on
a session and a property collector of its own, delivered as one complete inventory first and
then as each feed's changes."""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pyVmomi import vim

from hostaffinity.node_labeller.core.inventory import (
    HOST,
    VM,
    WATCHED_PROPERTIES,
    Inventory,
    ObjectUpdate,
)
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher, UpdateBatch, vcenter_sessions
from tests.e2e.harness import inventory
from tests.e2e.labeller_harness import relocate, session_keys
from tests.platform.tcp_proxy import SlowRequests
from tests.platform.vcsim import Vcsim, VcsimFactory


@asynccontextmanager
async def watching(vc: Vcsim, port: int | None = None) -> AsyncIterator[InventoryWatcher]:
    """A watcher of `vc`, reached on `port` (a proxy's) if given."""
    settings = vc.settings() if port is None else vc.settings(port=port)
    watcher = InventoryWatcher(settings, WATCHED_PROPERTIES)
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def next_batch(watcher: InventoryWatcher, within: float = 10) -> UpdateBatch:
    return await asyncio.wait_for(watcher.batches.get(), within)


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
        assert len(session_keys(admin) - before) == vcenter_sessions(WATCHED_PROPERTIES) == 3

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
        # The read waits for neither feed's long poll.
        assert time.monotonic() - asked < 1.0
        assert {(u.obj_type, u.moid) for u in batch.updates} >= seen - {
            (kind, moid) for kind, moid in seen if kind == "Task"
        }
    # A stop cancels both long polls and logs every session out.
    assert session_keys(admin) == before


async def test_a_move_during_a_full_read_is_delivered_at_once_and_kept_by_the_read(
    vcsim: VcsimFactory,
) -> None:
    """The periodic resync's read takes seconds at thousands of VMs. A vMotion meanwhile must
    reach the labeller as a change at once, and the resync batch must end with the move applied
    whenever the read's snapshot was taken: the changes delivered during the read follow it."""
    vc = vcsim(hosts=3, vms=6)
    admin = vc.connect()
    # Every request 0.5 s late: the read (a collector, a view, a filter, the answer, and their
    # destruction) takes over 3 s, while the VM feed's poll in flight answers a move at once.
    proxy = SlowRequests(vc.host, vc.port, latency=0.5)
    await proxy.start()
    try:
        async with watching(vc, port=proxy.port) as watcher:
            assert (await next_batch(watcher, within=60)).resync  # three slow logins first
            vm = inventory(admin, vim.VirtualMachine)[0]
            target = next(h for h in inventory(admin, vim.HostSystem) if h != vm.runtime.host)

            def moved(update: ObjectUpdate) -> bool:
                return update.moid == vm._moId and update.props.get("runtime.host") == target._moId

            await asyncio.sleep(0.5)  # the VM feed is in a long poll
            watcher.request_full_read()
            await asyncio.sleep(1.0)  # the read is under way (a watch that stopped for it has)
            await asyncio.to_thread(relocate, admin, vm.name, target.name)
            changes = []
            while not (batch := await next_batch(watcher)).resync:
                changes.append(batch)
            assert any(moved(u) for change in changes for u in change.updates), (
                "the move waited for the full read"
            )
            # The snapshot's entry, then the move delivered during the read, again: whenever
            # the snapshot read the VM, the batch leaves it where it is now.
            about_vm = [u for u in batch.updates if u.moid == vm._moId]
            assert [u.kind for u in about_vm] == ["enter", "modify"]
            assert moved(about_vm[-1])
            read = Inventory()
            for update in batch.updates:
                read.apply(update)
            facts = read.vm(vm._moId)
            assert facts is not None
            assert facts.host_moid == target._moId
    finally:
        await proxy.stop()


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
