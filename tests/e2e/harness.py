"""What the in-process service harnesses share: fast Lease timings, the runner's sections that
point a service at the test's nats-server and Kubernetes double, polling, and vcsim reads."""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from prometheus_client import REGISTRY
from pyVmomi import vim

from hostaffinity.runtime.process.config import (
    HealthSettings,
    KubernetesSettings,
    LeaseSettings,
    NatsSettings,
)
from hostaffinity.schema import EsxiHost, NodePlacement
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer

# Leadership changes within seconds, so failover tests stay short.
FAST_LEASE = LeaseSettings(
    namespace="kube-system",
    duration_seconds=2.0,
    renew_deadline_seconds=1.5,
    retry_period_seconds=0.2,
)


class BusPlatform(Protocol):
    """A bus the tests run services on: one open nats-server (`NatsServer`, which ignores the
    identity) or the shipped, secured cluster (`NatsCluster`, where it is the service's)."""

    def settings(self, identity: str) -> NatsSettings: ...


def runner_sections(nats: BusPlatform, kubeconfig: Path, identity: str) -> dict[str, Any]:
    """Config sections for a service run in-process: this bus as the service's identity, the
    double through its kubeconfig, a health server on a free port and the fast Lease (its name
    from the service)."""
    return {
        "nats": nats.settings(identity),
        "health": HealthSettings(host="127.0.0.1", port=0),
        "kubernetes": KubernetesSettings(kubeconfig=str(kubeconfig)),
        "lease": FAST_LEASE,
    }


async def eventually(check: Callable[[], bool], what: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def eventually_async(
    check: Callable[[], Awaitable[bool]], what: str, within: float = 15.0
) -> None:
    """`eventually` for a check that must await (a read of the bus)."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def bus_rebuilt_with(
    nats: NatsServer, nodes: Iterable[NodePlacement], hosts: Iterable[EsxiHost] = ()
) -> None:
    """An outage after which NATS comes back with its store lost: provisioning runs again and
    the node-labeller writes what exists now. Whatever it does not write went away during the
    outage, and no deletion of it is ever delivered: a reader learns it only by reading the
    whole bucket again and dropping what was not there."""
    await nats.restart(keep_store=False)
    async with nats.connection("provision") as provisioning:
        store = await provisioning.provision()
        for node in nodes:
            await store.put_node(node)
        for host in hosts:
            await store.put_host(host)


async def default_events(kube: KubeDouble) -> list[dict[str, Any]]:
    """The Kubernetes Events in `default`, read over the API: the test pods' Events, and those
    of cluster-scoped objects such as Nodes, which live there."""
    headers = {"Authorization": f"Bearer {kube.token}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.get(f"{kube.url}/api/v1/namespaces/default/events") as response,
    ):
        items: list[dict[str, Any]] = json.loads(await response.read())["items"]
        return items


def inventory(si: vim.ServiceInstance, kind: type) -> list[Any]:
    """Every managed object of `kind` in vCenter's inventory."""
    content = si.RetrieveContent()
    return list(content.viewManager.CreateContainerView(content.rootFolder, [kind], True).view)


def finished(task: Any) -> Any:
    """A vCenter task's info once it has succeeded (an administrator's call, waited for)."""
    while task.info.state not in ("success", "error"):
        time.sleep(0.005)
    assert task.info.state == "success", task.info.error
    return task.info


def metric(name: str, **labels: str) -> float:
    """A sample's value as /metrics shows it (summed over the labels not named); the services
    run in-process report there once the `telemetry` fixture installed the providers."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
