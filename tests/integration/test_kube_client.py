"""KubeClient's time limits against the Kubernetes double: no call waits for ever."""

from __future__ import annotations

import time

import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube.client import NODES, KubeClient
from hostaffinity.runtime.process.config import KubernetesSettings
from tests.platform.kube_double import KubeDouble


async def test_a_hung_request_times_out(kube_double: KubeDouble) -> None:
    kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}})
    kube_double.fault("nodes", "worker-1").hold()
    async with ApiClient(kube_double.configuration()) as api:
        client = KubeClient(api, KubernetesSettings(request_timeout_seconds=0.5))
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.request("GET", NODES.path("worker-1"))
        assert time.monotonic() - started < 5, "bounded by the request timeout, not hanging"
        kube_double.fault("nodes", "worker-1").release()


async def test_a_watch_asks_the_server_to_end_it(kube_double: KubeDouble) -> None:
    """`timeoutSeconds` goes on every watch; the double ends the stream when it runs out."""
    async with ApiClient(kube_double.configuration()) as api:
        client = KubeClient(api, KubernetesSettings(watch_timeout_seconds=1))
        started = time.monotonic()
        async with client.stream(NODES.path(), {"watch": "true"}) as lines:
            async for _ in lines:
                pass
        assert 0.9 < time.monotonic() - started < 10
