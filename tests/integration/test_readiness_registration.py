"""/readyz of the scheduler-extender and the admission webhook is 503 until every part of their
work has been added and passes: both were seen answering 200 in the moment between NATS
connecting and their work adding its parts (only "nats connected" was known then)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostaffinity.admission_webhook.main import service_spec as webhook_spec
from hostaffinity.admission_webhook.service import AdmissionWebhookWork
from hostaffinity.runtime.process.config import HealthSettings, KubernetesSettings
from hostaffinity.runtime.runner import ServiceContext, ServiceRunner, ServiceSpec
from hostaffinity.scheduler_extender.config import ExtenderSettings, SchedulerExtenderConfig
from hostaffinity.scheduler_extender.main import service_spec as extender_spec
from hostaffinity.scheduler_extender.service import SchedulerExtenderWork
from tests.integration.webhook_harness import (
    readiness,
    seed_configuration,
    seed_namespace,
    settings,
    written_ca,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer

READY_WITHIN_SECONDS = 20.0


async def _readyz_as_the_work_starts(
    spec: ServiceSpec[Any], config: Any, serving: Callable[[], bool]
) -> tuple[int, str]:
    """/readyz asked when the work is handed its context, before it has added anything; then
    /readyz polled until 200, where `serving` must already hold."""
    first: list[tuple[int, str]] = []

    async def looking_first(ctx: ServiceContext[Any]) -> None:
        first.append(await readiness(runner.health.port))
        await spec.work(ctx)

    runner = ServiceRunner(dataclasses.replace(spec, work=looking_first), config)
    task = asyncio.create_task(runner.run())
    try:
        deadline = time.monotonic() + READY_WITHIN_SECONDS
        while not first or (await readiness(runner.health.port))[0] != 200:
            assert not task.done(), task
            assert time.monotonic() < deadline, "never ready"
            await asyncio.sleep(0.02)
        assert serving(), "/readyz said 200 before the service served"
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)
    return first[0]


async def test_the_extender_is_not_ready_before_its_parts_are_added_and_pass(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}})
    config = SchedulerExtenderConfig(
        nats=nats_server.settings(),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        extender=ExtenderSettings(host="127.0.0.1", port=0),
    )
    work = SchedulerExtenderWork()

    def serving() -> bool:
        return work.server is not None and work.server.port != 0

    status, text = await _readyz_as_the_work_starts(extender_spec(work), config, serving)
    assert status == 503, text
    for part in ("pods", "nodes", "namespaces", "placements"):
        assert f"[-] {part} synced: not registered yet\n" in text
    assert "[-] extender listening: not registered yet\n" in text


async def test_the_webhook_is_not_ready_before_its_parts_are_added_and_pass(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    seed_namespace(kube_double)
    seed_configuration(kube_double)
    work = AdmissionWebhookWork()

    def serving() -> bool:
        return (
            work.server is not None and work.server.serving and written_ca(kube_double) is not None
        )

    spec = webhook_spec(work)
    status, text = await _readyz_as_the_work_starts(
        spec, settings(nats_server, kubeconfig), serving
    )
    assert status == 503, text
    assert "[-] webhook listening: not registered yet\n" in text
    assert "[-] webhook registered: not registered yet\n" in text
