"""Paged LISTs over more objects and namespaces than the recordings hold: every object once, in
etcd's key order (`<namespace>/<name>`), the rest counted, and a continued page still showing
the list's revision while the store changes between pages. The double cuts pages from an
ordered index instead of copying the store per page; these hold it to the same answers."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from tests.platform.kube_double import KubeDouble

# "a-b" sorts before "a" in etcd's keys ("a-b/..." < "a/..."), not after it as a tuple would.
NAMESPACES = ("a", "a-b", "b")


def pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"n": name[-1]}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/c:1"}]},
    }


def seeded(kube: KubeDouble) -> list[str]:
    for namespace in NAMESPACES:
        kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for index in range(7):
            kube.seed(pod(namespace, f"p{index}"))
    return sorted(f"{ns}/p{i}" for ns in NAMESPACES for i in range(7))


async def pages(
    kube: KubeDouble, path: str, limit: int, between: Any = None
) -> list[dict[str, Any]]:
    """Every page of a LIST; `between(n)` runs after page n."""
    headers = {"Authorization": f"Bearer {kube.token}"}
    found: list[dict[str, Any]] = []
    query = f"limit={limit}"
    async with aiohttp.ClientSession(headers=headers) as http:
        while True:
            async with http.get(f"{kube.url}{path}?{query}") as response:
                assert response.status == 200, await response.text()
                body = await response.json()
            found.append(body)
            if between is not None:
                between(len(found))
            token = body["metadata"].get("continue")
            if not token:
                return found
            query = f"limit={limit}&continue={token}"


def names(bodies: list[dict[str, Any]]) -> list[str]:
    return [
        f"{i['metadata']['namespace']}/{i['metadata']['name']}" for b in bodies for i in b["items"]
    ]


async def test_a_paged_list_holds_every_object_once_in_key_order(kube_double: KubeDouble) -> None:
    expected = seeded(kube_double)
    bodies = await pages(kube_double, "/api/v1/pods", limit=4)
    assert names(bodies) == expected
    assert [b["metadata"].get("remainingItemCount") for b in bodies[:-1]] == [
        len(expected) - 4 * n for n in range(1, len(bodies))
    ]
    assert all("kind" not in item for b in bodies for item in b["items"])


async def test_a_namespace_pages_only_its_own_objects(kube_double: KubeDouble) -> None:
    seeded(kube_double)
    bodies = await pages(kube_double, "/api/v1/namespaces/a/pods", limit=3)
    assert names(bodies) == [f"a/p{i}" for i in range(7)]
    assert bodies[0]["metadata"]["remainingItemCount"] == 4


async def test_a_continued_list_shows_its_revision_not_later_writes(
    kube_double: KubeDouble,
) -> None:
    expected = seeded(kube_double)

    def write(page: int) -> None:
        if page == 1:
            kube_double.seed(pod("b", "p9"))  # created after the list's revision
            kube_double.delete("v1", "pods", "p6", "b")  # deleted after it
            changed = kube_double.read("v1", "pods", "p5", "b")
            assert changed is not None
            changed["metadata"]["labels"]["n"] = "changed"
            kube_double.write(changed)

    bodies = await pages(kube_double, "/api/v1/pods", limit=5, between=write)
    assert names(bodies) == expected
    labels = {
        item["metadata"]["name"]: item["metadata"]["labels"]["n"]
        for body in bodies
        for item in body["items"]
        if item["metadata"]["namespace"] == "b"
    }
    assert labels["p5"] == "5"
    assert {b["metadata"]["resourceVersion"] for b in bodies} == {
        bodies[0]["metadata"]["resourceVersion"]
    }


async def test_a_selector_pages_without_counting_the_rest(kube_double: KubeDouble) -> None:
    seeded(kube_double)
    headers = {"Authorization": f"Bearer {kube_double.token}"}
    url = f"{kube_double.url}/api/v1/pods?limit=2&labelSelector=n%3D3"
    async with aiohttp.ClientSession(headers=headers) as http, http.get(url) as response:
        body = await response.json()
    assert names([body]) == ["a-b/p3", "a/p3"]
    assert body["metadata"]["continue"]
    assert "remainingItemCount" not in body["metadata"]


def test_every_write_carries_its_commit_time(kube_double: KubeDouble) -> None:
    before = time.time()
    _, subscription = kube_double.store.subscribe("namespaces", kube_double.store.rv)
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "timed"}})
    change = subscription.queue.get_nowait()
    kube_double.store.unsubscribe(subscription)
    assert before <= change.at <= time.time()
