"""node-labeller under faults: every label and KV entry ends equal to vCenter's truth, nothing lost.

Real parts throughout: vcsim, a real nats-server (stopped and started again on the same port and
store) and the Kubernetes double (taken down and brought back on the same port). Placement
changes are made with RelocateVM_Task while the fault lasts.
"""

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager

import nats.errors
import pytest
from pyVmomi import vim

from hostaffinity.node_labeller.config import LabellerSettings
from hostaffinity.node_labeller.core.inventory import WATCHED_PROPERTIES
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher, vcenter_sessions
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import TopologyStore
from hostaffinity.runtime.process.config import KubernetesSettings, LeaseSettings
from hostaffinity.schema import LABEL_ESXI_HOST, TopologySnapshot, VmMoved
from tests.e2e.labeller_harness import (
    HOSTS,
    NODES,
    LabellerParts,
    converges,
    eventually,
    node_labels,
    relocate,
    session_keys,
    stream_events,
    vcenter_truth,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.tcp_proxy import TcpProxy

# Moves made during an outage, spaced over it; node-1 moves twice, so a retry that applied the
# first desired state after the second would show.
OUTAGE_MOVES = [
    ("node-1", "DC0_C0_H1"),
    ("node-2", "DC0_C0_H2"),
    ("node-1", "DC0_C0_H2"),
    ("node-4", "DC0_C0_H1"),
]
# No periodic resync during the outage tests: retries alone must converge.
NO_RESYNC = 3600.0
WATCH_SESSIONS = vcenter_sessions(WATCHED_PROPERTIES)  # two feeds and the full reads
# A Lease that outlives an 8 s API outage (the labeller keeps leading through it).
OUTAGE_LEASE = LeaseSettings(
    namespace="kube-system",
    duration_seconds=20.0,
    renew_deadline_seconds=15.0,
    retry_period_seconds=1.0,
)


@contextmanager
def peak_sessions(si: vim.ServiceInstance) -> Iterator[list[int]]:
    """Samples vcsim's session count every 20 ms on a thread; yields [peak] (updated live)."""
    peak = [len(session_keys(si))]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], len(session_keys(si)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


async def move_across_a_reset(
    proxy: TcpProxy,
    watcher: InventoryWatcher,
    admin: vim.ServiceInstance,
    node: str,
    hosts: Iterator[str],
    *,
    refused_for: float = 0.0,
) -> tuple[str, str]:
    """Reset the watch's connections (and refuse new ones for `refused_for` seconds, so even
    the old session's logout fails), moving `node`'s VM meanwhile; returns (node, new host)."""
    before = watcher.reconnects
    if refused_for:
        await proxy.refuse()
    else:
        assert proxy.reset() >= 1, "the watch holds a connection through the proxy"
    # The move happens while the watcher is backing off and logging in again.
    current = (await asyncio.to_thread(vcenter_truth, admin))[node]
    target = next(host for host in hosts if host != current)
    await asyncio.to_thread(relocate, admin, node, target)
    if refused_for:
        await asyncio.sleep(refused_for)
        await proxy.accept()
    await eventually(lambda: watcher.reconnects > before, "the watch reconnected")
    return node, target


async def labelled(kube: KubeDouble, node: str, host: str) -> None:
    await eventually(
        lambda: node_labels(kube, node)[LABEL_ESXI_HOST] == host, f"{node} labelled {host}"
    )


async def test_twenty_forced_reconnects_keep_one_session_and_lose_no_move(
    parts: LabellerParts, bus: Bus
) -> None:
    # `admin` is the test's one session; the labeller holds one per feed of its watch, no more.
    vc, admin = parts.vcenter(vms=6, nodes=NODES)
    proxy = TcpProxy(vc.host, vc.port)
    await proxy.start()
    hosts = itertools.cycle(HOSTS)
    moves: list[tuple[str, str]] = []
    try:
        async with parts.labeller(
            vc, vcenters=[vc.settings(name="vcsim", port=proxy.port)]
        ) as replica:
            watcher = replica.watcher
            assert watcher is not None
            with peak_sessions(admin) as peak:
                for round_ in range(20):
                    node = NODES[round_ % len(NODES)]
                    refused_for = 1.0 if round_ % 5 == 4 else 0.0  # four rounds of twenty
                    moves.append(
                        await move_across_a_reset(
                            proxy, watcher, admin, node, hosts, refused_for=refused_for
                        )
                    )
                    await labelled(parts.kube, node, moves[-1][1])
            assert peak[0] <= 1 + WATCH_SESSIONS, f"{peak[0]} vCenter sessions at once"
            assert watcher.reconnects >= 20
            truth = await asyncio.to_thread(vcenter_truth, admin)
            store = await bus.topology()
            for node in NODES:
                assert node_labels(parts.kube, node)[LABEL_ESXI_HOST] == truth[node]
                placement = await store.get_node(node)
                assert placement is not None
                assert placement.host_name == truth[node]
    finally:
        await proxy.stop()
    assert len(await asyncio.to_thread(session_keys, admin)) == 1, "the labeller logged out"
    moved = [(e.node, e.to_host_name) for e in await stream_events(bus) if isinstance(e, VmMoved)]
    assert moved == moves


async def moves_during(
    outage: float, admin: vim.ServiceInstance, kept: Callable[[str, str], Awaitable[None]]
) -> None:
    """Make OUTAGE_MOVES spread over `outage` seconds, checking `kept(node, host)` after each."""
    started = time.monotonic()
    for index, (node, host) in enumerate(OUTAGE_MOVES):
        await asyncio.sleep(max(0.0, started + index * outage / 5 - time.monotonic()))
        await asyncio.to_thread(relocate, admin, node, host)
        await kept(node, host)
    await asyncio.sleep(max(0.0, started + outage - time.monotonic()))


async def assert_every_move_announced(nats: NatsServer, moves: list[tuple[str, str]]) -> None:
    """Each moved node's `vm.moved` events follow its moves in order and end where its last move
    went. Moves of one VM while the KV could not be written coalesce (an event describes a
    stored state, and the retry stores the newest one), so they need not all appear."""
    async with nats.connection("checker") as bus:
        events = [e for e in await stream_events(bus) if isinstance(e, VmMoved)]
    for node in {node for node, _ in moves}:
        made = [host for moved, host in moves if moved == node]
        announced = [e.to_host_name for e in events if e.node == node]
        assert announced, f"{node} moved to {made} but no vm.moved was announced"
        assert announced[-1] == made[-1], (node, announced, made)
        remaining = iter(made)
        assert all(host in remaining for host in announced), (node, announced, made)
    assert {e.node for e in events} == {node for node, _ in moves}


@asynccontextmanager
async def placed_labeller(parts: LabellerParts) -> AsyncIterator[vim.ServiceInstance]:
    """A labeller that has placed six nodes and rides out the outage; yields the test's
    vCenter session. Kubernetes calls give up after 2 s, so a held one fails and is retried."""
    vc, admin = parts.vcenter(vms=6, nodes=NODES)
    kubernetes = KubernetesSettings(kubeconfig=str(parts.kubeconfig), request_timeout_seconds=2.0)
    async with parts.labeller(
        vc,
        lease=OUTAGE_LEASE,
        labeller=LabellerSettings(resync_seconds=NO_RESYNC),
        kubernetes=kubernetes,
    ):
        yield admin


async def test_nats_down_ten_seconds_with_moves_converges_and_loses_nothing(
    parts: LabellerParts,
) -> None:
    async with placed_labeller(parts) as admin:
        before = {node: node_labels(parts.kube, node)[LABEL_ESXI_HOST] for node in NODES}
        await parts.nats.stop()

        async def labels_wait_for_the_kv(node: str, host: str) -> None:
            """KV first: with the KV unreachable no label may run ahead of it."""
            await asyncio.sleep(0.5)
            now = {node: node_labels(parts.kube, node)[LABEL_ESXI_HOST] for node in NODES}
            assert now == before

        await moves_during(10.0, admin, labels_wait_for_the_kv)
        await parts.nats.start()  # same port, same store
        await converges(parts.kube, admin, parts.nats)

        await assert_every_move_announced(parts.nats, OUTAGE_MOVES)


@asynccontextmanager
async def api_killed(kube: KubeDouble) -> AsyncIterator[None]:
    """As a SIGKILLed kube-apiserver: connections refused, then back on the same store."""
    await kube.kill()
    yield
    await kube.revive()


@asynccontextmanager
async def api_held(kube: KubeDouble) -> AsyncIterator[None]:
    """As a stalled etcd: every request on the Nodes hangs (and is carried out on release,
    after its client gave up, as a real server does)."""
    faults = [kube.fault("nodes", node) for node in NODES]
    for fault in faults:
        fault.hold()
    yield
    for fault in faults:
        fault.release()


@pytest.mark.parametrize("outage", [api_killed, api_held], ids=["killed", "held"])
async def test_api_down_eight_seconds_with_moves_converges_and_loses_nothing(
    parts: LabellerParts, outage: Callable[[KubeDouble], AbstractAsyncContextManager[None]]
) -> None:
    async with placed_labeller(parts) as admin:

        async def kv_goes_on(node: str, host: str) -> None:
            """The KV does not wait for the API: it follows vCenter during the outage."""
            async with parts.nats.connection("checker") as bus:
                store = await bus.topology()
                deadline = time.monotonic() + 5.0
                while (placement := await store.get_node(node)) is None or (
                    placement.host_name != host
                ):
                    assert time.monotonic() < deadline, f"KV of {node} never showed {host}"
                    await asyncio.sleep(0.05)

        async with outage(parts.kube):
            await moves_during(8.0, admin, kv_goes_on)
        await converges(parts.kube, admin, parts.nats)

        await assert_every_move_announced(parts.nats, OUTAGE_MOVES)


async def test_a_first_topology_read_the_bus_leaves_unanswered_is_asked_again(
    parts: LabellerParts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The KV is read whole as the work starts; a bus that does not answer then (a server of
    the cluster killed as the replica took the Lease: the fault campaign with two installs,
    seed 2) made the work fail and the process exit 1 with `nats: timeout`. Now the replica
    asks again and labels."""
    vc, admin = parts.vcenter(vms=6, nodes=NODES)
    read = TopologyStore.snapshot
    asked = 0

    async def unanswered_twice(store: TopologyStore) -> TopologySnapshot:
        nonlocal asked
        asked += 1
        if asked <= 2:
            raise nats.errors.TimeoutError
        return await read(store)

    monkeypatch.setattr(TopologyStore, "snapshot", unanswered_twice)
    async with parts.labeller(
        vc, labeller=LabellerSettings(resync_seconds=NO_RESYNC, retry_max_seconds=0.1)
    ) as replica:
        await converges(parts.kube, admin, parts.nats)
        assert not replica.standby
    assert asked == 3
