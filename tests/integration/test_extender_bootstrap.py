"""The extender is not ready before every placement the topology KV held at its start is in its
cache, even when nats-server's API reply overtakes the watch's deliveries (the order nats-py
mistook for "no initial values", so the extender answered ready with no placements)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import HealthSettings, KubernetesSettings, NatsSettings
from hostaffinity.runtime.runner import running_service
from hostaffinity.scheduler_extender.config import ExtenderSettings, SchedulerExtenderConfig
from hostaffinity.scheduler_extender.main import service_spec
from hostaffinity.scheduler_extender.service import SchedulerExtenderWork
from tests.platform.bus_values import node_placement as placement
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.nats_delivery_lag import DeliveryLagProxy

NODES = [f"worker-{i}" for i in range(20)]


async def test_ready_only_once_every_stored_placement_is_known(
    nats_server: NatsServer, bus: Bus, kube_double: KubeDouble, tmp_path: Path
) -> None:
    store = await bus.provision()
    for node in NODES:
        kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        await store.put_node(placement(node, "host-11", version=1))
    proxy = DeliveryLagProxy("127.0.0.1", nats_server.port, lag=0.3, latency=0.05)
    await proxy.start()
    settings = SchedulerExtenderConfig(
        nats=NatsSettings(servers=[f"nats://127.0.0.1:{proxy.port}"]),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(
            kubeconfig=str(kube_double.write_kubeconfig(tmp_path / "kubeconfig"))
        ),
        extender=ExtenderSettings(host="127.0.0.1", port=0),
    )
    work = SchedulerExtenderWork()
    try:
        async with running_service(service_spec(work), settings) as runner:
            url = f"http://127.0.0.1:{runner.health.port}/readyz"
            async with aiohttp.ClientSession() as http:
                for _ in range(1000):
                    async with http.get(url) as response:
                        if response.status == 200:
                            break
                    await asyncio.sleep(0.01)
                assert response.status == 200, "never ready"
            assert work.cache is not None
            known = {node: work.cache.host_of(node) for node in NODES}
            assert known == dict.fromkeys(NODES, "host-11"), "ready without every placement"
    finally:
        await proxy.stop()
