"""The informer against the Kubernetes API double: 410 recovery and per-object ordering."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube.client import NODES, KubeClient
from hostaffinity.runtime.kube.informer import (
    Informer,
    InformerEvent,
    InformerSettings,
    dict_decoder,
    msgspec_decoder,
)
from hostaffinity.runtime.process.config import KubernetesSettings
from tests.platform.kube_double import KubeDouble

FAST = InformerSettings(page_size=2, worker_idle_s=0.2)


class NodeMeta(msgspec.Struct):
    name: str
    resourceVersion: str
    labels: dict[str, str] = {}


class Node(msgspec.Struct):
    metadata: NodeMeta


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _relabel(double: KubeDouble, name: str, value: str) -> None:
    node = double.read("v1", "nodes", name)
    assert node is not None
    node["metadata"]["labels"]["example.com/step"] = value
    double.write(node)


async def _eventually(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    for _ in range(int(within_s / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture
async def client(kube_double: KubeDouble) -> AsyncIterator[KubeClient]:
    async with ApiClient(kube_double.configuration()) as api:
        yield KubeClient(api, KubernetesSettings(watch_timeout_seconds=30))


async def _running(informer: Informer[Any]) -> asyncio.Task[None]:
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(informer.synced.wait(), 10)
    return task


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _fresh_list(client: KubeClient) -> dict[str, Node]:
    """What a brand-new informer would hold: the reference for cache correctness."""
    informer = Informer(client, NODES, _ignore, msgspec_decoder(Node), settings=FAST)
    task = await _running(informer)
    await _stop(task)
    return dict(informer.cache)


async def _ignore(_event: InformerEvent[Any]) -> None:
    return None


async def test_informer_relists_after_forced_410(
    kube_double: KubeDouble, client: KubeClient
) -> None:
    """Changes made while the watch is down and the history is compacted are recovered."""
    for i in range(5):
        kube_double.seed(_node(f"worker-{i}", pool="cpu"))
    seen: list[tuple[str, str]] = []

    async def record(event: InformerEvent[Node]) -> None:
        seen.append((event.type, event.key))

    informer = Informer(client, NODES, record, msgspec_decoder(Node), settings=FAST)
    task = await _running(informer)
    try:
        assert set(informer.cache) == {f"worker-{i}" for i in range(5)}
        # No await between these lines: the informer cannot see the changes before the
        # history that would replay them is gone, so its next watch gets the 410 ERROR event.
        kube_double.disconnect_watches()
        _relabel(kube_double, "worker-0", "changed")
        kube_double.delete("v1", "nodes", "worker-1")
        kube_double.seed(_node("worker-9", pool="gpu"))
        kube_double.compact()

        await _eventually(lambda: informer.relists >= 2)
        await _eventually(lambda: "worker-9" in informer.cache and informer.pending() == 0)
        fresh = await _fresh_list(client)
        assert informer.cache == fresh
        assert informer.cache["worker-0"].metadata.labels["example.com/step"] == "changed"
        assert ("DELETED", "worker-1") in seen
        assert ("ADDED", "worker-9") in seen

        # And it keeps watching after the re-list.
        _relabel(kube_double, "worker-2", "live")
        await _eventually(
            lambda: informer.cache["worker-2"].metadata.labels.get("example.com/step") == "live"
        )
    finally:
        await _stop(task)


async def test_informer_keeps_per_object_order_and_runs_objects_in_parallel(
    kube_double: KubeDouble, client: KubeClient
) -> None:
    names = [f"node-{i}" for i in range(4)]
    for name in names:
        kube_double.seed(_node(name))
    handled: dict[str, list[int]] = {name: [] for name in names}
    running = 0
    peak = 0

    async def slow(event: InformerEvent[dict[str, Any]]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(random.uniform(0, 0.01))
        handled[event.key].append(int(event.obj["metadata"]["resourceVersion"]))
        running -= 1

    informer: Informer[dict[str, Any]] = Informer(client, NODES, slow, dict_decoder, settings=FAST)
    task = await _running(informer)
    try:
        for step in range(15):
            for name in names:
                _relabel(kube_double, name, str(step))
        await _eventually(lambda: all(len(v) == 16 for v in handled.values()))
        for name, versions in handled.items():
            assert versions == sorted(versions), f"{name} handled out of order: {versions}"
        assert peak > 1, "different objects should be handled in parallel"
    finally:
        await _stop(task)


async def test_informer_skips_an_object_it_cannot_decode(
    kube_double: KubeDouble, client: KubeClient
) -> None:
    kube_double.seed(_node("good"))
    bad = _node("bad")
    kube_double.seed(bad)
    node = kube_double.read("v1", "nodes", "bad")
    assert node is not None
    node["metadata"]["labels"] = {"broken": 7}  # not a string: fails the Struct
    kube_double.write(node)

    informer = Informer(client, NODES, _ignore, msgspec_decoder(Node), settings=FAST)
    task = await _running(informer)
    try:
        assert set(informer.cache) == {"good"}
    finally:
        await _stop(task)


async def test_informer_is_caught_up_only_once_its_handlers_ran_the_first_list(
    kube_double: KubeDouble, client: KubeClient
) -> None:
    """`synced` says the list is cached; `caught_up` waits for the handlers too, including an
    event a worker has taken off its queue but not yet handed to the handler."""
    kube_double.seed(_node("worker-1"))
    release = asyncio.Event()

    async def held(_event: InformerEvent[Node]) -> None:
        await release.wait()

    informer = Informer(client, NODES, held, msgspec_decoder(Node), settings=FAST)
    assert not informer.caught_up()
    task = await _running(informer)
    try:
        assert not informer.caught_up()  # listed, but the handler holds the event
        release.set()
        await _eventually(informer.caught_up)
    finally:
        await _stop(task)
