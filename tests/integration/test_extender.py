"""scheduler-extender against real parts: the Kubernetes double, a real nats-server, vcsim and
the node-labeller, all driven over the extender's HTTP API as kube-scheduler would."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    node_object,
    relocate,
    running,
    wait_ready,
)
from tests.integration.extender_harness import (
    ANTI,
    call,
    extender,
    filter_args,
    pod_object,
    seed_004,
)
from tests.platform.bus_values import node_placement as placement
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory


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
