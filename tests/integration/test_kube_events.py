"""EventRecorder against the Kubernetes double: Events land where the API server wants them, and a
recurring problem is one Event whose count rises, written at a bounded rate, from bounded memory."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from tests.platform.kube_double import KubeDouble


@pytest.fixture
async def kube(kube_double: KubeDouble) -> AsyncIterator[KubeClient]:
    async with ApiClient(kube_double.configuration()) as api:
        yield KubeClient(api)


async def test_an_event_about_a_node_is_written_in_default_and_repeats_are_counted(
    kube: KubeClient, kube_double: KubeDouble
) -> None:
    recorder = EventRecorder(kube, "hostaffinity-node-labeller", "pod-0")
    node = ObjectRef(kind="Node", name="worker-1", uid="u-1")
    await recorder.record(node, "NodeUnmatched", "no VM in vCenter matches this node")
    await recorder.record(node, "NodeUnmatched", "no VM in vCenter matches this node")
    await recorder.record(node, "VmHasNoHost", "VM node-1 has no ESXi host")

    items = json.loads(await kube.request("GET", "/api/v1/namespaces/default/events"))["items"]
    by_reason = {item["reason"]: item for item in items}
    assert set(by_reason) == {"NodeUnmatched", "VmHasNoHost"}
    unmatched = by_reason["NodeUnmatched"]
    assert unmatched["count"] == 2
    assert unmatched["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "worker-1",
        "uid": "u-1",
    }
    assert unmatched["type"] == "Warning"
    assert unmatched["source"] == {"component": "hostaffinity-node-labeller"}


async def events_of(kube: KubeClient, node: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        await kube.request("GET", "/api/v1/namespaces/default/events")
    )["items"]
    return [item for item in items if item["involvedObject"]["name"] == node]


async def test_repeats_beyond_the_burst_are_counted_and_carried_by_the_next_write(
    kube: KubeClient,
) -> None:
    recorder = EventRecorder(
        kube, "hostaffinity-node-labeller", "pod-0", burst=1, refill_seconds=0.3
    )
    node = ObjectRef(kind="Node", name="worker-1")

    written = [await recorder.record(node, "NodeUnmatched", "no VM") for _ in range(4)]

    assert written == [True, False, False, False]
    [event] = await events_of(kube, "worker-1")
    assert event["count"] == 1
    await asyncio.sleep(0.35)  # one token back
    assert await recorder.record(node, "NodeUnmatched", "no VM")
    [event] = await events_of(kube, "worker-1")
    assert event["count"] == 5
    assert event["lastTimestamp"] >= event["firstTimestamp"]


async def test_the_series_table_is_bounded_and_forgets_the_least_recent(kube: KubeClient) -> None:
    recorder = EventRecorder(kube, "hostaffinity-node-labeller", "pod-0", max_series=2)
    first, second, third = (ObjectRef(kind="Node", name=f"worker-{i}") for i in (1, 2, 3))
    await recorder.record(first, "NodeUnmatched", "no VM")
    await recorder.record(second, "NodeUnmatched", "no VM")
    await recorder.record(first, "NodeUnmatched", "no VM")  # first is now the most recent
    await recorder.record(third, "NodeUnmatched", "no VM")  # second is forgotten

    assert recorder.tracked_series() == 2
    await recorder.record(first, "NodeUnmatched", "no VM")
    await recorder.record(second, "NodeUnmatched", "no VM")  # a new series: a new Event

    assert [e["count"] for e in await events_of(kube, "worker-1")] == [3]
    assert sorted(e["count"] for e in await events_of(kube, "worker-2")) == [1, 1]
    assert recorder.tracked_series() == 2


async def test_an_expired_event_is_written_again_with_the_series_count(
    kube: KubeClient, kube_double: KubeDouble
) -> None:
    recorder = EventRecorder(kube, "hostaffinity-node-labeller", "pod-0")
    node = ObjectRef(kind="Node", name="worker-1")
    await recorder.record(node, "VmHasNoHost", "VM node-1 has no ESXi host")
    [expired] = await events_of(kube, "worker-1")
    kube_double.delete("v1", "events", expired["metadata"]["name"], "default")

    assert await recorder.record(node, "VmHasNoHost", "VM node-1 has no ESXi host")

    [event] = await events_of(kube, "worker-1")
    assert event["metadata"]["name"] != expired["metadata"]["name"]
    assert event["count"] == 2


async def test_a_failing_api_never_raises_into_the_caller(kube_double: KubeDouble) -> None:
    async with ApiClient(kube_double.configuration(token="not-a-valid-token")) as api:
        recorder = EventRecorder(KubeClient(api), "hostaffinity-node-labeller", "pod-0")
        assert not await recorder.record(ObjectRef(kind="Node", name="worker-1"), "R", "message")
