"""Which cluster an install serves, read as the runner reads it: the configured name, else the
`id.k8s.io` ClusterProperty, else the `kube-system` Namespace's UID; against the API double."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.runtime.kube.cluster_identity import (
    ClusterIdentity,
    ClusterIdentityUnknown,
    read_cluster_identity,
)
from hostaffinity.runtime.process.config import KubernetesSettings
from tests.platform.kube_double import KubeDouble


@pytest.fixture
async def kube(kube_double: KubeDouble) -> AsyncIterator[KubeClient]:
    async with ApiClient(kube_double.configuration()) as api:
        yield KubeClient(api, KubernetesSettings())


def kube_system_uid(double: KubeDouble) -> str:
    namespace = double.read("v1", "namespaces", "kube-system")
    assert namespace is not None
    return str(namespace["metadata"]["uid"])


async def test_a_configured_name_wins_without_asking_the_api(kube: KubeClient) -> None:
    assert await read_cluster_identity(kube, "prod-east") == ClusterIdentity(
        "prod-east", "configured"
    )


async def test_without_a_cluster_property_the_kube_system_uid_is_the_identity(
    kube: KubeClient, kube_double: KubeDouble
) -> None:
    assert await read_cluster_identity(kube, "") == ClusterIdentity(
        kube_system_uid(kube_double), "kube-system-uid"
    )


@pytest.mark.parametrize("name", ["id.k8s.io", "cluster.clusterset.k8s.io"])
async def test_the_multi_cluster_api_s_cluster_id_comes_before_the_uid(
    kube: KubeClient, kube_double: KubeDouble, name: str
) -> None:
    kube_double.seed(
        {
            "apiVersion": "about.k8s.io/v1beta1",
            "kind": "ClusterProperty",
            "metadata": {"name": name},
            "spec": {"value": "cluster-7"},
        }
    )
    assert await read_cluster_identity(kube, "") == ClusterIdentity("cluster-7", "cluster-property")


async def test_a_refused_kube_system_read_says_what_to_set(kube_double: KubeDouble) -> None:
    config = kube_double.configuration(token="not-a-known-token")
    async with ApiClient(config) as api:
        with pytest.raises(ClusterIdentityUnknown, match=r"set shared\.cluster\.name"):
            await read_cluster_identity(KubeClient(api, KubernetesSettings()), "")


async def test_read_soon_after_an_api_outage_ends(
    kube: KubeClient, kube_double: KubeDouble
) -> None:
    """A replica that starts while the API answers 500 learns the identity within one retry
    pace (2 s) of the API's return, however long the outage lasted: it is the next leader."""
    outage_s = 8.0
    fault = kube_double.fault("namespaces", "kube-system")
    fault.failing = True
    loop = asyncio.get_running_loop()
    reading = asyncio.create_task(read_cluster_identity(kube, ""))
    await asyncio.sleep(outage_s)
    assert not reading.done()
    fault.clear()
    back = loop.time()
    identity = await reading
    assert identity == ClusterIdentity(kube_system_uid(kube_double), "kube-system-uid")
    assert loop.time() - back < 3.0  # doubling to 10 s, the next try came 7.5 s after
