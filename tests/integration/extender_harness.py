"""The scheduler extender as its integration tests run it: started as main() starts it, called
as kube-scheduler calls it, with the pods and placements it reads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from hostaffinity.runtime.process.config import HealthSettings, KubernetesSettings
from hostaffinity.runtime.runner import running_service
from hostaffinity.scheduler_extender.config import ExtenderSettings, SchedulerExtenderConfig
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.feeds import CacheFeeds
from hostaffinity.scheduler_extender.http import ExtenderServer
from hostaffinity.scheduler_extender.main import service_spec
from hostaffinity.scheduler_extender.service import SchedulerExtenderWork
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.harness import BusPlatform
from tests.e2e.labeller_harness import node_object
from tests.platform.kube_double import KubeDouble
from tests.platform.vcsim import Vcsim, VcsimFactory

ANTI = "node(s) didn't match pod anti-affinity rules"


@dataclass(frozen=True)
class RunningExtender:
    """The parts of a started extender the tests look at."""

    cache: ExtenderCache
    server: ExtenderServer
    feeds: CacheFeeds
    health_port: int


@contextlib.asynccontextmanager
async def extender(nats: BusPlatform, kubeconfig: Path) -> AsyncIterator[RunningExtender]:
    """The service as main() starts it, on loopback ports, once /readyz says ready."""
    settings = SchedulerExtenderConfig(
        nats=nats.settings("scheduler-extender"),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        extender=ExtenderSettings(host="127.0.0.1", port=0, decision_sample_ratio=1.0),
    )
    work = SchedulerExtenderWork()
    async with running_service(service_spec(work), settings) as runner:
        url = f"http://127.0.0.1:{runner.health.port}/readyz"
        statuses: list[int] = []

        async def ready() -> bool:
            async with aiohttp.ClientSession() as http, http.get(url) as response:
                statuses.append(response.status)
                return response.status == 200

        for _ in range(500):
            if await ready():
                break
            await asyncio.sleep(0.02)
        assert statuses[-1] == 200, statuses
        assert work.cache is not None
        assert work.server is not None
        assert work.feeds is not None
        yield RunningExtender(work.cache, work.server, work.feeds, runner.health.port)


async def call(extender: RunningExtender, verb: str, body: dict[str, Any]) -> Any:
    url = f"http://127.0.0.1:{extender.server.port}/{verb}"
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as response:
        assert response.status == 200
        return await response.json()


def pod_object(
    name: str, app: str, *, node: str = "", avoid: str | None = None, owner: str | None = None
) -> dict[str, Any]:
    """A Pod manifest; `avoid` adds required anti-affinity to that app on the ESXi-host key."""
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"app": app}}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": f"uid-{owner}",
             "controller": True}
        ]  # fmt: skip
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.invalid/pause:3"}]}
    if node:
        spec["nodeName"] = node
    if avoid is not None:
        term = {"labelSelector": {"matchLabels": {"app": avoid}}, "topologyKey": LABEL_ESXI_HOST}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def filter_args(kube: KubeDouble, name: str, nodes: list[str]) -> dict[str, Any]:
    """What kube-scheduler posts with nodeCacheCapable: the stored pod and node names."""
    return {"Pod": kube.read("v1", "pods", name, "default"), "Nodes": None, "NodeNames": nodes}


def seed_004(vcsim: VcsimFactory, kube: KubeDouble) -> Vcsim:
    """Seed 004: node1 and node2 on ESXi host DC0_C0_H0, node3 on DC0_C0_H1 (vcsim puts VM i on
    host i mod 2); p1 runs on node1, p3 (pending) must avoid p1's host."""
    vc = vcsim(hosts=2, vm_names=["node1", "node3", "node2"])
    for name in ("node1", "node2", "node3"):
        kube.seed(node_object(name))
    kube.seed(pod_object("p1", "p1", node="node1"))
    kube.seed(pod_object("p3", "p3", avoid="p1"))
    return vc
