"""scheduler-extender against real parts: the Kubernetes double, a real nats-server, vcsim and
the node-labeller, all driven over the extender's HTTP API as kube-scheduler would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from hostaffinity.runtime.bus import Bus
from hostaffinity.runtime.config import HealthSettings, KubernetesSettings
from hostaffinity.runtime.runner import running_service
from hostaffinity.scheduler_extender.cache import ExtenderCache
from hostaffinity.scheduler_extender.config import ExtenderSettings, SchedulerExtenderSettings
from hostaffinity.scheduler_extender.feeds import CacheFeeds
from hostaffinity.scheduler_extender.http import ExtenderServer
from hostaffinity.scheduler_extender.main import service_spec
from hostaffinity.scheduler_extender.service import Extender
from hostaffinity.schema import LABEL_ESXI_HOST, NodePlacement
from tests.e2e.harness import BusPlatform
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    node_object,
    relocate,
    running,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
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
    settings = SchedulerExtenderSettings(
        nats=nats.settings("scheduler-extender"),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        extender=ExtenderSettings(host="127.0.0.1", port=0, decision_sample_ratio=1.0),
    )
    work = Extender()
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


def placement(node: str, host: str) -> NodePlacement:
    return NodePlacement(
        node=node, vm_moid=f"vm-{node}", bios_uuid="", instance_uuid="", host_moid=f"m-{host}",
        host_name=host, host_label=host, cluster_moid="c", cluster_name="C0", datacenter="DC0",
        vcenter="vc", observed_at="2026-11-22T08:00:00Z", version=1,
    )  # fmt: skip


async def test_cache_follows_the_api_and_the_topology_kv(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, bus: Bus
) -> None:
    topology = await bus.topology()
    for node, host in (("n1", "h1"), ("n2", "h1"), ("n3", "h2")):
        kube_double.seed(node_object(node))
        await topology.put_node(placement(node, host))
    kube_double.seed(pod_object("db", "db", node="n1"))
    kube_double.seed(pod_object("web", "web", avoid="db"))
    async with extender(nats_server, kubeconfig) as running_ext:
        answer = await call(
            running_ext, "filter", filter_args(kube_double, "web", ["n1", "n2", "n3"])
        )
        assert answer["NodeNames"] == ["n3"]
        assert sorted(answer["FailedNodes"]) == ["n1", "n2"]

        await topology.put_node(placement("n3", "h1"))  # a vMotion, as the KV reports it
        await eventually(lambda: running_ext.cache.host_of("n3") == "h1", "placement followed")
        answer = await call(running_ext, "filter", filter_args(kube_double, "web", ["n2", "n3"]))
        assert (answer["NodeNames"], sorted(answer["FailedNodes"])) == ([], ["n2", "n3"])

        kube_double.delete("v1", "pods", "db", "default")
        await eventually(lambda: running_ext.cache.index.pod("default/db") is None, "pod deleted")
        answer = await call(running_ext, "filter", filter_args(kube_double, "web", ["n2", "n3"]))
        assert (answer["NodeNames"], answer["FailedNodes"]) == (["n2", "n3"], {})


def seed_004(vcsim: VcsimFactory, kube: KubeDouble) -> Vcsim:
    """Seed 004: node1 and node2 on ESXi host DC0_C0_H0, node3 on DC0_C0_H1 (vcsim puts VM i on
    host i mod 2); p1 runs on node1, p3 (pending) must avoid p1's host."""
    vc = vcsim(hosts=2, vm_names=["node1", "node3", "node2"])
    for name in ("node1", "node2", "node3"):
        kube.seed(node_object(name))
    kube.seed(pod_object("p1", "p1", node="node1"))
    kube.seed(pod_object("p3", "p3", avoid="p1"))
    return vc


async def test_seed_004_end_to_end(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    vc = seed_004(vcsim, kube_double)
    async with running(labeller_config(vc, nats_server, kubeconfig)) as labeller:
        await wait_ready(labeller)
        async with extender(nats_server, kubeconfig) as running_ext:
            asked = ["node1", "node2", "node3"]
            answer = await call(running_ext, "filter", filter_args(kube_double, "p3", asked))
            assert answer["NodeNames"] == ["node3"]
            assert answer["FailedAndUnresolvableNodes"] == {}
            reason = answer["FailedNodes"]["node2"]
            assert reason.startswith(f"{ANTI}: pod default/p1 (on node node1) matches")
            assert reason.endswith(f"domain {LABEL_ESXI_HOST}=DC0_C0_H0")

            # Hold the labeller's label patch of node3: only the KV can tell the extender.
            hold = kube_double.hold_patches("nodes", "node3")
            relocate(vc.connect(), "node3", "DC0_C0_H0")
            rejected: dict[str, Any] = {}

            async def node3_rejected() -> bool:
                rejected.update(
                    await call(running_ext, "filter", filter_args(kube_double, "p3", asked))
                )
                return "node3" in rejected["FailedNodes"]

            for _ in range(750):
                if await node3_rejected():
                    break
                await asyncio.sleep(0.02)
            assert rejected["NodeNames"] == []
            assert rejected["FailedNodes"]["node3"].endswith(f"{LABEL_ESXI_HOST}=DC0_C0_H0")
            # The labeller did try to relabel node3, and is still held: the label is stale.
            await eventually(hold.arrived.is_set, "the labeller's patch reached the API")
            assert node_labels(kube_double, "node3")[LABEL_ESXI_HOST] == "DC0_C0_H1"
            hold.release()
            await eventually(
                lambda: node_labels(kube_double, "node3")[LABEL_ESXI_HOST] == "DC0_C0_H0",
                "label patched once released",
            )


async def test_three_replicas_bound_back_to_back_land_on_three_hosts(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, bus: Bus
) -> None:
    topology = await bus.topology()
    hosts = {"a1": "ha", "a2": "ha", "b1": "hb", "b2": "hb", "c1": "hc", "c2": "hc"}
    for node, host in hosts.items():
        kube_double.seed(node_object(node))
        await topology.put_node(placement(node, host))
    replicas = [f"web-{i}" for i in range(3)]
    for name in replicas:
        kube_double.seed(pod_object(name, "web", avoid="web", owner="web-rs"))
    async with extender(nats_server, kubeconfig) as running_ext:
        for name in replicas:
            args = filter_args(kube_double, name, list(hosts))
            answer = await call(running_ext, "filter", args)
            # Take the first feasible node: the worst case for spreading, since a1 and a2 share
            # a host and a stale cache would offer a2 right after a1.
            node = answer["NodeNames"][0]
            pod = args["Pod"]["metadata"]
            bound = await call(
                running_ext,
                "bind",
                {"PodName": name, "PodNamespace": "default", "PodUID": pod["uid"], "Node": node},
            )
            assert bound == {"Error": ""}
        placed = {}
        for name in replicas:
            stored = kube_double.read("v1", "pods", name, "default")
            assert stored is not None
            placed[name] = hosts[stored["spec"]["nodeName"]]
        assert sorted(placed.values()) == ["ha", "hb", "hc"], placed
        # A fourth replica has nowhere to go, and the answer says why for every node.
        kube_double.seed(pod_object("web-3", "web", avoid="web", owner="web-rs"))
        answer = await call(running_ext, "filter", filter_args(kube_double, "web-3", list(hosts)))
        assert answer["NodeNames"] == []
        assert sorted(answer["FailedNodes"]) == sorted(hosts)
        second_bind = await call(
            running_ext,
            "bind",
            {"PodName": "web-0", "PodNamespace": "default", "PodUID": "", "Node": "c2"},
        )
        assert second_bind["Error"].startswith("binding default/web-0 to c2 failed: HTTP 409")
