"""Every service through the runner rides out a killed API server (issue 9's table:
kube-apiserver SIGKILL, down 8 s): connections refused or reset are transient for every path
(leader, informers, work queues, Events, health), the process goes on, a leader-elected one
keeps its Lease (production timings: 15 s, renew deadline 10 s, retry 2 s; the API is back
2 s before the deadline), it is ready again after the API returns, and no task is left behind
(the leaked-task guard runs for every test).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from hostaffinity.descheduler.main import service_spec as descheduler_spec
from hostaffinity.descheduler.service import DeschedulerWork
from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.process.config import HealthSettings, KubernetesSettings, LeaseSettings
from hostaffinity.runtime.runner import ServiceRunner, running_service
from hostaffinity.scheduler_extender.config import ExtenderSettings, SchedulerExtenderConfig
from hostaffinity.scheduler_extender.main import service_spec as extender_spec
from hostaffinity.scheduler_extender.service import SchedulerExtenderWork
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.descheduler_harness import descheduler_config
from tests.e2e.drs_harness import cycles_after, drs_config, running_translator
from tests.e2e.labeller_harness import (
    NODES,
    LabellerParts,
    converges,
    eventually,
    node_labels,
    relocate,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

OUTAGE_SECONDS = 8.0
RECOVERY_SECONDS = 30.0
PRODUCTION_LEASE = LeaseSettings(namespace="kube-system")


def kubernetes(kubeconfig: Path) -> KubernetesSettings:
    """Calls give up after 2 s, so one caught by the kill fails and is retried."""
    return KubernetesSettings(kubeconfig=str(kubeconfig), request_timeout_seconds=2.0)


async def ready(runner: ServiceRunner[Any]) -> bool:
    """/readyz answers 200 (the health server stops when the runner ends)."""
    url = f"http://127.0.0.1:{runner.health.port}/readyz"
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def eventually_ready(runner: ServiceRunner[Any], within: float) -> None:
    deadline = time.monotonic() + within
    while not await ready(runner):
        assert time.monotonic() < deadline, "not ready again"
        await asyncio.sleep(0.1)


async def ride_out_an_api_kill(
    runner: ServiceRunner[Any],
    kube: KubeDouble,
    during: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Kill the API (right after a renewal, for a leader) for 8 s, running `during` meanwhile;
    the service must lead throughout, still run, and be ready again once the API is back."""
    elector = runner.elector
    if elector is not None:
        renewed = elector.renewed_at
        await eventually(lambda: elector.renewed_at != renewed, "a renewal", 5.0)
    await kube.kill()
    killed_at = time.monotonic()
    if during is not None:
        await during()
    while time.monotonic() - killed_at < OUTAGE_SECONDS:
        assert elector is None or elector.is_leader, "stepped down with the Lease still valid"
        await asyncio.sleep(0.05)
    await kube.revive()
    await eventually_ready(runner, RECOVERY_SECONDS)
    assert runner.working.is_set()
    assert not runner.stopping
    if elector is not None:
        await eventually(lambda: elector.renewed_at > killed_at, "a renewal after the outage")
        assert elector.is_leader


async def test_labeller_keeps_leading_through_an_eight_second_api_kill(
    parts: LabellerParts,
) -> None:
    vc, admin = parts.vcenter(vms=6, nodes=NODES)
    config = {"lease": PRODUCTION_LEASE, "kubernetes": kubernetes(parts.kubeconfig)}
    async with parts.labeller(vc, **config) as replica:

        async def move() -> None:
            await asyncio.to_thread(relocate, admin, "node-1", "DC0_C0_H2")

        await ride_out_an_api_kill(replica.runner, parts.kube, move)
        await converges(parts.kube, admin, parts.nats)
        assert node_labels(parts.kube, "node-1")[LABEL_ESXI_HOST] == "DC0_C0_H2"


async def test_descheduler_keeps_leading_through_an_eight_second_api_kill(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    config = msgspec.structs.replace(
        descheduler_config(nats_server, kubeconfig),
        lease=PRODUCTION_LEASE,
        kubernetes=kubernetes(kubeconfig),
    )
    work = DeschedulerWork()
    async with running_service(descheduler_spec(work), config, identity="d-a") as runner:
        await eventually(work.synced, "descheduler synced", within=20)
        await ride_out_an_api_kill(runner, kube_double)


async def test_drs_translator_keeps_leading_through_an_eight_second_api_kill(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    vc = vcsim(hosts=3, vms=2)
    config = msgspec.structs.replace(
        drs_config(vc, nats_server, kubeconfig),
        lease=PRODUCTION_LEASE,
        kubernetes=kubernetes(kubeconfig),
        drs=DrsSettings(resync_seconds=2.0),  # cycles go on after the outage: the work does
    )
    async with running_translator(config) as running:
        await ride_out_an_api_kill(running.runner, kube_double)
        await cycles_after(running, 1, within=RECOVERY_SECONDS)


async def test_extender_stays_up_through_an_eight_second_api_kill(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    settings = SchedulerExtenderConfig(
        nats=nats_server.settings(),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=kubernetes(kubeconfig),
        extender=ExtenderSettings(host="127.0.0.1", port=0),
    )
    async with running_service(extender_spec(SchedulerExtenderWork()), settings) as runner:
        await eventually_ready(runner, 20)
        await ride_out_an_api_kill(runner, kube_double)
