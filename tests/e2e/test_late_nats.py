"""A service started before its nats-server: not ready while NATS is away, then ready once it
is up, and nothing that happened meanwhile is lost (the node-labeller through the runner)."""

import asyncio
from pathlib import Path

import aiohttp
import msgspec

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import LABEL_ESXI_HOST, NodeLabelled, NodePlaced
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    node_object,
    relocate,
    running,
    stream_events,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

NODES = [f"node-{i}" for i in range(1, 5)]
NATS_LATE_SECONDS = 10.0


async def _readyz(port: int) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return response.status, await response.text()


async def test_a_labeller_started_before_nats_waits_and_loses_nothing(
    vcsim: VcsimFactory, kube_double: KubeDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    vc = vcsim(hosts=3, vms=4)
    for name in NODES:
        kube_double.seed(node_object(name))
    late = NatsServer(tmp_path)  # a fixed free port, nothing listening on it yet
    settings = msgspec.structs.replace(late.settings(), connect_retry_max_seconds=1.0)
    config = msgspec.structs.replace(labeller_config(vc, late, kubeconfig), nats=settings)
    try:
        async with running(config) as replica:
            port = replica.runner.health.port
            # The vMotion happens while the labeller cannot reach NATS.
            await asyncio.to_thread(relocate, vc.connect(), "node-1", "DC0_C0_H2")
            await asyncio.sleep(NATS_LATE_SECONDS)
            status, text = await _readyz(port)
            assert (status, text.splitlines()[0]) == (503, "not ready: nats connected")
            assert replica.standby, "no work (no Lease, no labels) before NATS is there"
            await late.start()
            await late.provision()  # the provisioning Job runs once NATS is up
            await wait_ready(replica, within=30)
            assert (await _readyz(port))[0] == 200
            await eventually(
                lambda: node_labels(kube_double, "node-1").get(LABEL_ESXI_HOST) == "DC0_C0_H2",
                "the move made while NATS was away reaches the label",
            )
            assert all(LABEL_ESXI_HOST in node_labels(kube_double, n) for n in NODES)
            bus = await Bus.connect(NatsSettings(servers=[late.url]), name="test-reader")
            try:
                events = await stream_events(bus)
                placements = await bus.topology()
                placed = {e.node: e.host_name for e in events if isinstance(e, NodePlaced)}
                assert placed == {n: node_labels(kube_double, n)[LABEL_ESXI_HOST] for n in NODES}
                assert {e.node for e in events if isinstance(e, NodeLabelled)} == set(NODES)
                stored = await placements.get_node("node-1")
                assert stored is not None
                assert stored.host_name == "DC0_C0_H2"
            finally:
                await bus.close()
    finally:
        await late.stop()
