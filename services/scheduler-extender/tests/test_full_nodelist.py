"""Filter at 5,000 kubelet-sized nodes (~11 KB each, ~55 MB a request with nodeCacheCapable:
false): 200 with the right subset in both forms, and the NodeList answer echoes each passing node
byte for byte as it was received."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from hostaffinity.affinity.model import decode_pod
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.http import ExtenderServer
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics
from hostaffinity.schema import LABEL_ESXI_HOST, EventFactory
from tests.platform.kubelet_nodes import kubelet_node

NODES = 5_000
PER_HOST = 10
NAMES = [f"node-{i:05d}" for i in range(NODES)]
HOSTS = {name: f"esx-{i // PER_HOST:03d}" for i, name in enumerate(NAMES)}
DB = {"metadata": {"name": "db-0", "namespace": "default", "labels": {"app": "db"}},
      "spec": {"nodeName": NAMES[0]}}  # fmt: skip
RESERVED = "hostaffinity: pod default/web is held on ESXi host"


def web_pod(avoid_db: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]}
    if avoid_db:
        term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": LABEL_ESXI_HOST}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    return {"metadata": {"name": "web", "namespace": "default", "uid": "uid-web",
                         "labels": {"app": "web"}}, "spec": spec}  # fmt: skip


@pytest.fixture(scope="module")
def node_items() -> list[bytes]:
    return [json.dumps(kubelet_node(name, i)).encode() for i, name in enumerate(NAMES)]


@pytest.fixture
async def base_url(make_cache: Callable[..., ExtenderCache]) -> AsyncIterator[str]:
    cache = make_cache(HOSTS, [decode_pod(json.dumps(DB))])

    async def publish(_event: object) -> None:
        return None

    decisions = SampledPublisher("scheduler-extender", publish, ratio=0.0, capacity=1)
    async with ApiClient(Configuration(host="http://127.0.0.1:9")) as api:
        binder = Binder(KubeClient(api), 1.0)
        server = ExtenderServer(
            cache, binder, ExtenderMetrics(cache), decisions, EventFactory("scheduler-extender")
        )
        await server.start("127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{server.port}"
        finally:
            await server.stop()


def body(pod: dict[str, Any], items: list[bytes] | None) -> bytes:
    """ExtenderArgs as kube-scheduler encodes them, full NodeList or names."""
    head = b'{"Pod":' + json.dumps(pod).encode()
    if items is None:
        return head + b',"Nodes":null,"NodeNames":' + json.dumps(NAMES).encode() + b"}"
    nodes = b'{"metadata":{"resourceVersion":"5000"},"items":[' + b",".join(items) + b"]}"
    return head + b',"Nodes":' + nodes + b',"NodeNames":null}'


async def post_filter(url: str, data: bytes) -> tuple[dict[str, Any], bytes]:
    async with aiohttp.ClientSession() as http, http.post(f"{url}/filter", data=data) as response:
        assert response.status == 200, await response.text()
        raw = await response.read()
    answer: dict[str, Any] = json.loads(raw)
    assert answer["Error"] == ""
    return answer, raw


def passed_names(answer: dict[str, Any]) -> list[str]:
    if answer["NodeNames"] is not None:
        return list(answer["NodeNames"])
    return [item["metadata"]["name"] for item in answer["Nodes"]["items"]]


@pytest.mark.parametrize("full", [True, False], ids=["full-nodes", "node-names"])
async def test_an_unconcerned_pod_passes_all_5000_nodes(
    base_url: str, node_items: list[bytes], full: bool
) -> None:
    data = body(web_pod(avoid_db=False), node_items if full else None)
    answer, raw = await post_filter(base_url, data)
    assert passed_names(answer) == NAMES
    assert (answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]) == ({}, {})
    if full:
        assert answer["Nodes"]["metadata"] == {"resourceVersion": "5000"}
        assert b"[" + b",".join(node_items) + b"]" in raw  # every node echoed byte for byte


@pytest.mark.parametrize("full", [True, False], ids=["full-nodes", "node-names"])
async def test_an_anti_affine_pod_gets_one_host_without_the_db(
    base_url: str, node_items: list[bytes], full: bool
) -> None:
    data = body(web_pod(avoid_db=True), node_items if full else None)
    answer, raw = await post_filter(base_url, data)
    passed = passed_names(answer)
    hosts = {HOSTS[name] for name in passed}
    assert len(passed) == PER_HOST
    assert len(hosts) == 1
    assert hosts != {HOSTS[NAMES[0]]}
    failed = answer["FailedNodes"]
    assert sorted([*passed, *failed]) == NAMES
    db_host = [name for name in NAMES if HOSTS[name] == HOSTS[NAMES[0]]]
    assert all(failed[n].startswith("node(s) didn't match pod anti-affinity") for n in db_host)
    others = set(failed) - set(db_host)
    assert all(failed[name].startswith(RESERVED) for name in others)
    if full:
        held = b",".join(node_items[NAMES.index(name)] for name in passed)
        assert b"[" + held + b"]" in raw
