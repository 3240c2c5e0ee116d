"""The admission webhook as its integration tests run it: started as main() starts it, registered
with the shipped configuration, posted AdmissionReviews over its TLS port."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from hostaffinity.admission_webhook.config import AdmissionWebhookConfig, WebhookSettings
from hostaffinity.admission_webhook.http import AdmissionWebhook
from hostaffinity.admission_webhook.main import service_spec
from hostaffinity.admission_webhook.service import AdmissionWebhookWork
from hostaffinity.runtime.process.config import HealthSettings, KubernetesSettings
from hostaffinity.runtime.runner import running_service
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.recorded_fixtures import fixture_dir

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "k8s" / "base" / "admission-webhook" / "mutatingwebhookconfiguration.yaml"
FIXTURE = fixture_dir("kube-apiserver-admission") / "pod-create-review.json"
WEBHOOKS = "admissionregistration.k8s.io/v1"


def settings(nats: NatsServer, kubeconfig: Path) -> AdmissionWebhookConfig:
    return AdmissionWebhookConfig(
        nats=nats.settings(),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        webhook=WebhookSettings(
            host="127.0.0.1", port=0, extra_hostnames=["127.0.0.1"], event_sample_ratio=1.0
        ),
    )


async def eventually_true(check: Any, what: str) -> None:
    for _ in range(250):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(what)


@dataclass(frozen=True)
class RunningWebhook:
    """The parts of the started service these tests look at."""

    health_port: int
    webhook: AdmissionWebhook


async def readiness(health_port: int) -> tuple[int, str]:
    """/readyz's status and text (a 503 names the parts still waiting)."""
    url = f"http://127.0.0.1:{health_port}/readyz"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def ready(health_port: int) -> bool:
    return (await readiness(health_port))[0] == 200


@contextlib.asynccontextmanager
async def service(
    nats: NatsServer, kubeconfig: Path, kube: KubeDouble
) -> AsyncIterator[RunningWebhook]:
    """The service, ready, with its webhook listening and the caBundle written."""
    work = AdmissionWebhookWork()
    async with running_service(service_spec(work), settings(nats, kubeconfig)) as runner:
        await eventually_true(lambda: ready(runner.health.port), "the service never became ready")

        async def webhook_up() -> bool:
            return work.server is not None and work.server.serving and written_ca(kube) is not None

        await eventually_true(webhook_up, "the webhook never listened with its caBundle written")
        assert work.server is not None
        yield RunningWebhook(runner.health.port, work.server)


def written_ca(kube: KubeDouble) -> bytes | None:
    stored = kube.read(WEBHOOKS, "mutatingwebhookconfigurations", "hostaffinity-pod-host-terms")
    assert stored is not None
    bundle = stored["webhooks"][0]["clientConfig"].get("caBundle")
    return None if bundle is None else base64.b64decode(bundle)


async def post(service: RunningWebhook, body: bytes, ca: bytes) -> tuple[int, bytes]:
    """POST /mutate trusting only `ca`, with the host name checked, as kube-apiserver does."""
    trust = ssl.create_default_context(cadata=ca.decode())
    url = f"https://127.0.0.1:{service.webhook.port}/mutate?timeout=2s"
    headers = {"Content-Type": "application/json", "User-Agent": "kube-apiserver-admission"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=body, headers=headers, ssl=trust) as response,
    ):
        return response.status, await response.read()


async def created_pod(kube: KubeDouble, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` created through the double's API, its admission path included: as stored."""
    url = f"{kube.url}/api/v1/namespaces/{namespace}/pods"
    headers = {"Authorization": f"Bearer {kube.token}"}
    async with aiohttp.ClientSession() as http, http.post(url, json=pod, headers=headers) as r:
        assert r.status == 201, await r.text()
        created: dict[str, Any] = await r.json()
        return created


def seed_namespace(kube: KubeDouble) -> None:
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hostaffinity"}})


def seed_configuration(kube: KubeDouble) -> dict[str, Any]:
    """The webhook configuration as k8s/base ships it (no caBundle)."""
    configuration: dict[str, Any] = yaml.safe_load(CONFIGURATION.read_text())
    return kube.seed(configuration)


@pytest.fixture
def shipped_configuration(kube_double: KubeDouble) -> dict[str, Any]:
    """Our namespace and the webhook configuration as k8s/base ships it (no caBundle)."""
    seed_namespace(kube_double)
    return seed_configuration(kube_double)
