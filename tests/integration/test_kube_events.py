"""EventRecorder against the Kubernetes double: Events land where the API server wants them."""

import json
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube import KubeClient
from hostaffinity.runtime.kube_events import EventRecorder, ObjectRef
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


async def test_a_failing_api_never_raises_into_the_caller(kube_double: KubeDouble) -> None:
    async with ApiClient(kube_double.configuration(token="not-a-valid-token")) as api:
        recorder = EventRecorder(KubeClient(api), "hostaffinity-node-labeller", "pod-0")
        await recorder.record(ObjectRef(kind="Node", name="worker-1"), "Reason", "message")
