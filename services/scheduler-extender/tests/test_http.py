"""The HTTP server with the requests a real kube-scheduler v1.36.2 sent, in both forms.

`tests/fixtures/kube-scheduler-extender/` holds the nodeCacheCapable=false bodies; the
nodeCacheCapable=true form is the same with `"Nodes": null` and the names in `NodeNames`.
Answers are compared as whole JSON documents: every key, every value.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from hostaffinity.affinity.model import decode_pod
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.http import ExtenderServer, server_tls
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics
from hostaffinity.schema import LABEL_ESXI_HOST, EventFactory, ExtenderDecision
from tests.recorded_fixtures import fixture_dir

FIXTURES = fixture_dir("kube-scheduler-extender")
HOSTS = {"sched-node-1": "esx-a", "sched-node-2": "esx-a", "sched-node-3": "esx-b"}
# db-0 (app=db) runs on sched-node-1, so on ESXi host esx-a.
DB_0 = {"metadata": {"name": "db-0", "namespace": "k8sreal-s", "labels": {"app": "db"}},
        "spec": {"nodeName": "sched-node-1"}}  # fmt: skip
ANTI_DB = (
    "node(s) didn't match pod anti-affinity rules: pod k8sreal-s/db-0 (on node sched-node-1) "
    "matches the pod's required anti-affinity term {app=db} in namespaces [k8sreal-s] on "
    "topology key hostaffinity.io/esxi-host and is in the node's domain "
    "hostaffinity.io/esxi-host=esx-a"
)
NOT_SYNCED = (
    "hostaffinity scheduler-extender cache is not synced yet (pods, nodes, namespaces, placements)"
)
FILTER = "filter-args-full-nodes.json"
PRIORITIZE = "prioritize-args-full-nodes.json"


def recorded(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return loaded


def names_of(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["Nodes"]["items"]]


def cache_capable(body: dict[str, Any]) -> dict[str, Any]:
    """What kube-scheduler sends with nodeCacheCapable: true."""
    return {**body, "Nodes": None, "NodeNames": names_of(body)}


def avoiding_db(body: dict[str, Any]) -> dict[str, Any]:
    """The recorded pod with required anti-affinity to app=db on the ESXi-host key."""
    body = copy.deepcopy(body)
    body["Pod"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": LABEL_ESXI_HOST}
            ]
        }
    }
    return body


def passed(body: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The `Nodes`/`NodeNames` pair of an answer keeping `names`, in the request's form."""
    if body["Nodes"] is None:
        return {"Nodes": None, "NodeNames": names}
    items = [item for item in body["Nodes"]["items"] if item["metadata"]["name"] in names]
    return {"Nodes": {"metadata": body["Nodes"]["metadata"], "items": items}, "NodeNames": None}


class Harness:
    """A started server over a cache, and the decision events it published."""

    def __init__(self, server: ExtenderServer, published: list[ExtenderDecision]) -> None:
        self.server = server
        self.published = published

    async def post(self, verb: str, body: Any = None, *, raw: bytes = b"") -> tuple[int, Any]:
        data = raw or json.dumps(body).encode()
        url = f"http://127.0.0.1:{self.server.port}/{verb}"
        async with aiohttp.ClientSession() as session, session.post(url, data=data) as response:
            assert response.content_type == "application/json"
            return response.status, await response.json()


async def _running(
    cache: ExtenderCache, tls: ssl.SSLContext | None = None
) -> AsyncIterator[Harness]:
    published: list[ExtenderDecision] = []

    async def publish(event: ExtenderDecision) -> None:
        published.append(event)

    decisions = SampledPublisher("scheduler-extender", publish, ratio=1.0, capacity=10)
    # No bind goes out in these tests; the client points at a closed port.
    async with ApiClient(Configuration(host="http://127.0.0.1:9")) as api:
        binder = Binder(KubeClient(api), 1.0)
        server = ExtenderServer(
            cache, binder, ExtenderMetrics(cache), decisions, EventFactory("scheduler-extender")
        )
        await server.start("127.0.0.1", 0, tls)
        publisher = asyncio.create_task(decisions.run())
        try:
            yield Harness(server, published)
        finally:
            publisher.cancel()
            await asyncio.gather(publisher, return_exceptions=True)
            await server.stop()


@pytest.fixture
async def harness(make_cache: Callable[..., ExtenderCache]) -> AsyncIterator[Harness]:
    async for running in _running(make_cache(HOSTS, [decode_pod(json.dumps(DB_0))])):
        yield running


@pytest.fixture
async def unsynced(make_cache: Callable[..., ExtenderCache]) -> AsyncIterator[Harness]:
    async for running in _running(make_cache(HOSTS, synced=False)):
        yield running


FORMS = [pytest.param(lambda b: b, id="full-nodes"), pytest.param(cache_capable, id="node-names")]
Form = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.mark.parametrize("form", FORMS)
async def test_recorded_filter_passes_every_node(harness: Harness, form: Form) -> None:
    body = form(recorded(FILTER))
    status, answer = await harness.post("filter", body)
    assert status == 200
    assert answer == {
        **passed(body, ["sched-node-1", "sched-node-3", "sched-node-2"]),
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


@pytest.mark.parametrize("form", FORMS)
async def test_host_anti_affinity_fails_both_nodes_of_the_host(
    harness: Harness, form: Form
) -> None:
    body = form(avoiding_db(recorded(FILTER)))
    status, answer = await harness.post("filter", body)
    assert status == 200
    assert answer == {
        **passed(body, ["sched-node-3"]),
        "FailedNodes": {"sched-node-1": ANTI_DB, "sched-node-2": ANTI_DB},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


@pytest.mark.parametrize("form", FORMS)
async def test_recorded_prioritize_scores_in_the_asked_order(harness: Harness, form: Form) -> None:
    status, answer = await harness.post("prioritize", form(recorded(PRIORITIZE)))
    assert status == 200
    assert answer == [{"Host": "sched-node-3", "Score": 5}, {"Host": "sched-node-2", "Score": 5}]


@pytest.mark.parametrize("form", FORMS)
async def test_prioritize_prefers_the_other_host(harness: Harness, form: Form) -> None:
    body = avoiding_db(recorded(PRIORITIZE))
    weighted = body["Pod"]["spec"]["affinity"]["podAntiAffinity"]
    weighted["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {
            "weight": 50,
            "podAffinityTerm": weighted.pop("requiredDuringSchedulingIgnoredDuringExecution")[0],
        }
    ]
    status, answer = await harness.post("prioritize", form(body))
    assert (status, answer) == (
        200,
        [{"Host": "sched-node-3", "Score": 10}, {"Host": "sched-node-2", "Score": 5}],
    )


async def test_unsynced_filter_answers_error_and_prioritize_503(unsynced: Harness) -> None:
    status, answer = await unsynced.post("filter", cache_capable(recorded(FILTER)))
    assert (status, answer) == (
        200,
        {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": NOT_SYNCED,
        },
    )
    assert await unsynced.post("prioritize", recorded(PRIORITIZE)) == (503, {"Error": NOT_SYNCED})


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
async def test_malformed_bodies_get_400(harness: Harness, verb: str) -> None:
    status, answer = await harness.post(verb, raw=b'{"Pod": 7}')
    assert status == 400
    assert answer["Error"].startswith(f"malformed {verb} request: ")


async def test_bind_failure_is_reported_in_error(harness: Harness) -> None:
    args = {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "sched-node-3"}
    status, answer = await harness.post("bind", args)
    assert status == 200
    assert list(answer) == ["Error"]
    assert answer["Error"].startswith("binding default/p to sched-node-3: API server unreachable")


async def test_decisions_are_published(harness: Harness) -> None:
    await harness.post("filter", cache_capable(avoiding_db(recorded(FILTER))))
    for _ in range(100):
        if harness.published:
            break
        await asyncio.sleep(0.01)
    (event,) = harness.published
    assert (event.verb, event.pod, event.pod_uid, event.outcome) == (
        "filter",
        "k8sreal-s/sched-pod-2",
        "46e4db58-65d1-4ff6-a65d-773c9105e89d",
        "feasible",
    )
    assert (event.nodes_asked, event.nodes_passed) == (3, 1)
    assert event.rejections == {"node(s) didn't match pod anti-affinity rules": 2}
    assert event.id.startswith("extender.decision-")


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made with openssl."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_when_a_certificate_is_configured(
    make_cache: Callable[..., ExtenderCache], certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    tls = server_tls(str(cert), str(key))
    async for running in _running(make_cache(HOSTS), tls):
        url = f"https://127.0.0.1:{running.server.port}/filter"
        trust = ssl.create_default_context(cafile=str(cert))
        body = json.dumps(cache_capable(recorded(FILTER)))
        async with aiohttp.ClientSession() as http, http.post(url, data=body, ssl=trust) as answer:
            assert answer.status == 200
            assert (await answer.json())["NodeNames"] == [
                "sched-node-1",
                "sched-node-3",
                "sched-node-2",
            ]
        plain = url.replace("https://", "http://")
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                await http.post(plain, data=body)
