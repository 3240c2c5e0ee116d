"""node-labeller under faults: every label and KV entry ends equal to vCenter's truth, nothing lost.

Real parts throughout: vcsim, a real nats-server (stopped and started again on the same port and
store) and the Kubernetes double (taken down and brought back on the same port). Placement
changes are made with RelocateVM_Task while the fault lasts.
"""

import asyncio
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyVmomi import vim

from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher
from hostaffinity.runtime.bus import Bus
from hostaffinity.schema import LABEL_ESXI_HOST, VmMoved
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    relocate,
    running,
    seed_nodes,
    stream_events,
    vm_by_name,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.tcp_proxy import TcpProxy
from tests.platform.vcsim import VcsimFactory

NODES = [f"node-{i}" for i in range(1, 7)]
HOSTS = ["DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"]


def vcenter_truth(si: vim.ServiceInstance) -> dict[str, str]:
    """Each node VM's ESXi host name, as vCenter has it now."""
    return {name: vm_by_name(si, name).runtime.host.name for name in NODES}


def session_keys(si: vim.ServiceInstance) -> set[str]:
    manager = si.RetrieveContent().sessionManager
    assert manager is not None
    return {session.key for session in manager.sessionList}


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
) -> tuple[str, str]:
    """Reset the watch's connections, move `node`'s VM meanwhile; returns (node, new host)."""
    before = watcher.reconnects
    assert proxy.reset() >= 1, "the watch holds a connection through the proxy"
    # The move happens while the watcher is backing off and logging in again.
    current = (await asyncio.to_thread(vcenter_truth, admin))[node]
    target = next(host for host in hosts if host != current)
    await asyncio.to_thread(relocate, admin, node, target)
    await eventually(lambda: watcher.reconnects > before, "the watch reconnected")
    return node, target


async def labelled(kube: KubeDouble, node: str, host: str) -> None:
    await eventually(
        lambda: node_labels(kube, node)[LABEL_ESXI_HOST] == host, f"{node} labelled {host}"
    )


async def test_twenty_forced_reconnects_keep_one_session_and_lose_no_move(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc = vcsim(hosts=3, vms=6)
    admin = vc.connect()  # the test's one session; the labeller must hold at most one more
    seed_nodes(kube_double, admin, NODES)
    proxy = TcpProxy(vc.host, vc.port)
    await proxy.start()
    config = labeller_config(vc, nats_server, kubeconfig, vcenter=vc.settings(port=proxy.port))
    hosts = itertools.cycle(HOSTS)
    moves: list[tuple[str, str]] = []
    try:
        async with running(config) as service:
            await wait_ready(service)
            watcher = service.watcher
            assert watcher is not None
            with peak_sessions(admin) as peak:
                for round_ in range(20):
                    node = NODES[round_ % len(NODES)]
                    moves.append(await move_across_a_reset(proxy, watcher, admin, node, hosts))
                    await labelled(kube_double, node, moves[-1][1])
            assert peak[0] <= 2, f"{peak[0]} vCenter sessions at once"
            assert watcher.reconnects >= 20
            truth = await asyncio.to_thread(vcenter_truth, admin)
            store = await bus.topology()
            for node in NODES:
                assert node_labels(kube_double, node)[LABEL_ESXI_HOST] == truth[node]
                placement = await store.get_node(node)
                assert placement is not None
                assert placement.host_name == truth[node]
    finally:
        await proxy.stop()
    assert len(await asyncio.to_thread(session_keys, admin)) == 1, "the labeller logged out"
    moved = [(e.node, e.to_host_name) for e in await stream_events(bus) if isinstance(e, VmMoved)]
    assert moved == moves
