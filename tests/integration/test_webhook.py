"""The admission webhook as the admission-webhook service runs it, over HTTPS, self-signed path.

The Kubernetes double holds the shipped MutatingWebhookConfiguration (k8s/base); the service makes
its CA and serving certificate, keeps them in a Secret and writes the CA into that configuration.
Then, as kube-apiserver would: the served certificate must verify against that caBundle alone,
a recorded review must come back with the patch, and a body that is not a review gets 400 while
the service stays ready.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hostaffinity.admission_webhook import service as webhook_service
from hostaffinity.admission_webhook.main import service_spec
from hostaffinity.admission_webhook.registration import WebhookRegistration
from hostaffinity.admission_webhook.service import AdmissionWebhookWork
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.http.certificates import service_hostnames
from hostaffinity.runtime.kube.client import KubeClient, api_client
from hostaffinity.runtime.process.config import KubernetesSettings
from hostaffinity.runtime.process.telemetry import Telemetry, setup_telemetry
from hostaffinity.runtime.runner import running_service
from hostaffinity.schema import (
    EVENTS_STREAM,
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    PodMutated,
    decode_event,
    event_subject,
)
from tests.integration.webhook_harness import (
    FIXTURE,
    RunningWebhook,
    created_pod,
    eventually_true,
    post,
    readiness,
    ready,
    seed_configuration,
    seed_namespace,
    service,
    settings,
    shipped_configuration,  # noqa: F401 (the fixture, used by name)
    written_ca,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.kube_double.webhooks import WebhookCall
from tests.platform.nats import NatsServer

HOSTNAME_KEY = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@pytest.fixture(autouse=True)
def telemetry() -> Telemetry:
    """Installed as the service's main() does, so the instruments reach /metrics."""
    return setup_telemetry("hostaffinity-tests")


async def refused_reviews(service: RunningWebhook) -> float:
    """hostaffinity_webhook_reviews_total{outcome="refused"} as /metrics serves it."""
    url = f"http://127.0.0.1:{service.health_port}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        exposed = await response.text()
    for family in text_string_to_metric_families(exposed):
        for sample in family.samples:
            if sample.name == "hostaffinity_webhook_reviews_total" and (
                sample.labels.get("outcome") == "refused"
            ):
                return sample.value
    return 0.0


@pytest.mark.usefixtures("shipped_configuration")
async def test_self_signed_certificate_verifies_against_the_written_ca_bundle(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    recorded = json.loads(FIXTURE.read_text())["reviews"][0]
    async with service(nats_server, kubeconfig, kube_double) as running:
        ca = written_ca(kube_double)
        assert ca is not None
        status, body = await post(running, json.dumps(recorded["request_body"]).encode(), ca)
        assert status == 200
        response = json.loads(body)["response"]
        assert response["uid"] == recorded["request_body"]["request"]["uid"]
        assert response["patchType"] == "JSONPatch"
        assert json.loads(base64.b64decode(response["patch"]))[0]["value"]["topologyKey"] == (
            "hostaffinity.io/esxi-host"
        )
        # A CA that is not the one written does not verify the server.
        other = kube_double.read("v1", "secrets", "hostaffinity-webhook-tls", "hostaffinity")
        assert other is not None
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await post(running, b"{}", base64.b64decode(other["data"]["tls.crt"]))


async def test_not_ready_until_kube_apiserver_can_verify_it(
    nats_server: NatsServer,
    kubeconfig: Path,
    kube_double: KubeDouble,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replica listening but unable to write its caBundle (here the configuration is not
    there yet; RBAC would do the same) cannot be called by kube-apiserver: /readyz says so, and
    turns ready once the caBundle is written."""
    monkeypatch.setattr(webhook_service, "RETRY_SECONDS", (0.05,))
    seed_namespace(kube_double)
    work = AdmissionWebhookWork()
    async with running_service(service_spec(work), settings(nats_server, kubeconfig)) as runner:

        async def waiting_only_for_registration() -> bool:
            status, text = await readiness(runner.health.port)
            return (status, text.splitlines()[0]) == (503, "not ready: webhook registered")

        await eventually_true(waiting_only_for_registration, "only the registration missing")
        assert work.server is not None
        assert work.server.serving
        seed_configuration(kube_double)
        await eventually_true(lambda: ready(runner.health.port), "ready once registered")
        assert written_ca(kube_double) is not None


@pytest.mark.usefixtures("shipped_configuration")
async def test_malformed_body_gets_400_and_the_service_stays_ready(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    async with service(nats_server, kubeconfig, kube_double) as running:
        ca = written_ca(kube_double)
        assert ca is not None
        before = await refused_reviews(running)
        for body in (b"", b"{not json", b'{"request": {"uid": 1}}', b"[]"):
            status, text = await post(running, body, ca)
            assert status == 400, (body, text)
            assert b"not an AdmissionReview" in text
        assert await ready(running.health_port)
        assert await refused_reviews(running) == before + 4
        recorded = json.loads(FIXTURE.read_text())["reviews"][0]["request_body"]
        status, _ = await post(running, json.dumps(recorded).encode(), ca)
        assert status == 200


@pytest.mark.usefixtures("shipped_configuration")
async def test_a_restart_keeps_the_certificate_the_api_server_trusts(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """Replicas share one identity through the Secret: the second start reuses it."""
    async with service(nats_server, kubeconfig, kube_double):
        first = written_ca(kube_double)
    async with service(nats_server, kubeconfig, kube_double) as running:
        assert first is not None
        status, _ = await post(running, b"{}", first)
        assert status == 400
    assert written_ca(kube_double) == first


def opted_in_pod(name: str, *, twin: bool, annotated: bool = True) -> dict[str, Any]:
    """A pod as stored: with our twin and host label requirement when the webhook was reached."""
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME_KEY}
    affinity: dict[str, Any] = {"podAntiAffinity": {REQUIRED: [term]}}
    if twin:
        affinity["podAntiAffinity"][REQUIRED].append(term | {"topologyKey": LABEL_ESXI_HOST})
        exists = {"key": LABEL_ESXI_HOST, "operator": "Exists"}
        affinity["nodeAffinity"] = {
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [exists]}]}
        }
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"} if annotated else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "apps", "labels": {"app": "web"},
                     "annotations": annotations},
        "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}],
                 "affinity": affinity},
    }  # fmt: skip


def warnings_about(kube: KubeDouble, pod: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.store.objects("events", "apps")
        if e["involvedObject"]["name"] == pod and e["reason"] == "AdmittedWithoutHostTerms"
    ]


@pytest.mark.usefixtures("shipped_configuration")
async def test_opted_in_pods_admitted_without_the_webhook_get_an_event(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """Fail-open made visible: pods created while the webhook was down carry no twin."""
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
    kube_double.seed(opted_in_pod("missed", twin=False))
    kube_double.seed(opted_in_pod("mutated", twin=True))
    kube_double.seed(opted_in_pod("plain", twin=False, annotated=False))
    async with service(nats_server, kubeconfig, kube_double):

        async def reported() -> bool:
            return bool(warnings_about(kube_double, "missed"))

        await eventually_true(reported, "no Event on the pod admitted without its twin")
        (event,) = warnings_about(kube_double, "missed")
        assert event["type"] == "Warning"
        assert "1 host-key twin(s)" in event["message"]
        assert "host label requirement" in event["message"]
        late = opted_in_pod("missed-later", twin=False)
        kube_double.seed(late)

        async def reported_later() -> bool:
            return bool(warnings_about(kube_double, "missed-later"))

        await eventually_true(reported_later, "a pod created while running was not reported")
        assert not warnings_about(kube_double, "mutated")
        assert not warnings_about(kube_double, "plain")


@pytest.mark.usefixtures("shipped_configuration")
async def test_a_patched_pod_is_published_as_pod_mutated_but_not_a_dry_run(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, bus: Bus
) -> None:
    first, dry = (r["request_body"] for r in json.loads(FIXTURE.read_text())["reviews"][:2])
    subject = event_subject("pod.mutated")
    async with service(nats_server, kubeconfig, kube_double) as running:
        ca = written_ca(kube_double)
        assert ca is not None
        for review in (first, dry):
            status, _ = await post(running, json.dumps(review).encode(), ca)
            assert status == 200

        async def published() -> bool:
            info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=subject)
            return bool(info.state.subjects)

        await eventually_true(published, "no pod.mutated event reached the stream")
        await asyncio.sleep(0.2)  # the dry run's event, were it sent, would be there by now
    info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=subject)
    assert info.state.subjects == {subject: 1}
    message = await bus.js.get_last_msg(EVENTS_STREAM, subject)
    event = decode_event(message.data or b"")
    assert isinstance(event, PodMutated)
    assert event.request_uid == first["request"]["uid"]
    assert event.pod == "apps/web-7c9f8d6b5d-"
    assert event.owner == "ReplicaSet/web-7c9f8d6b5d"
    assert (event.twins, event.host_label_required, event.spread_added) == (2, True, False)


@pytest.mark.usefixtures("shipped_configuration")
async def test_replicas_starting_together_settle_on_one_identity(
    kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """Three replicas race to create the Secret: one wins, the others read its identity; a
    Secret made for other names is replaced (under its resourceVersion) by one of them."""
    names = service_hostnames("admission-webhook", "hostaffinity")
    async with await api_client(KubernetesSettings(kubeconfig=str(kubeconfig))) as api:
        client = KubeClient(api)

        def replica(hostnames: list[str]) -> WebhookRegistration:
            return WebhookRegistration(
                client,
                namespace="hostaffinity",
                secret_name="hostaffinity-webhook-tls",
                configuration_name="hostaffinity-pod-host-terms",
                hostnames=hostnames,
            )

        first = await asyncio.gather(*(replica(names[:1]).serving_identity() for _ in range(3)))
        assert len({identity.ca_pem for identity in first}) == 1
        renewed = await asyncio.gather(*(replica(names).serving_identity() for _ in range(3)))
        assert len({identity.ca_pem for identity in renewed}) == 1
        assert renewed[0].ca_pem != first[0].ca_pem
        stored = kube_double.read("v1", "secrets", "hostaffinity-webhook-tls", "hostaffinity")
        assert stored is not None
        assert base64.b64decode(stored["data"]["ca.crt"]) == renewed[0].ca_pem


@pytest.mark.usefixtures("shipped_configuration")
async def test_pods_created_through_the_api_are_mutated_by_the_service_or_admitted_as_sent(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """The double's admission path (kube_double/webhooks.py) calls the running service as
    kube-apiserver would: the shipped configuration's matchConditions, its caBundle, the
    Service's name on the certificate. Stopped, the webhook fails open (failurePolicy Ignore)."""
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
    endpoints: list[str] = []
    calls: list[WebhookCall] = []
    kube_double.call_webhooks(lambda namespace, name: list(endpoints), calls.append)

    async def create(pod: dict[str, Any]) -> dict[str, Any]:
        return await created_pod(kube_double, "apps", pod)

    async with service(nats_server, kubeconfig, kube_double) as running:
        endpoints.append(f"https://127.0.0.1:{running.webhook.port}")
        mutated = await create(opted_in_pod("mutated", twin=False))
        plain = await create(opted_in_pod("plain", twin=False, annotated=False))
    endpoints.clear()
    unmutated = await create(opted_in_pod("missed", twin=False))

    assert mutated["spec"]["affinity"] == opted_in_pod("x", twin=True)["spec"]["affinity"]
    assert plain["spec"]["affinity"] == opted_in_pod("x", twin=False)["spec"]["affinity"]
    assert unmutated["spec"]["affinity"] == opted_in_pod("x", twin=False)["spec"]["affinity"]
    assert [(c.name, c.outcome.split(":")[0]) for c in calls] == [
        ("mutated", "patched"),  # the plain pod does not match the conditions: no call
        ("missed", "failed"),
    ]


@pytest.mark.usefixtures("shipped_configuration")
async def test_a_replica_that_fills_the_last_usable_host_gets_an_admission_warning(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """Replicas >= usable ESXi hosts under a required host term: the pod is admitted and
    patched, and whoever created it reads why the next rollout would deadlock."""
    kube = kube_double
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
    for name, host in (("node1", "esxi-1"), ("node2", "esxi-2"), ("node3", "esxi-3")):
        kube.seed(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {HOSTNAME_KEY: name, LABEL_ESXI_HOST: host}},
                "spec": {},
            }
        )
    recorded = json.loads(FIXTURE.read_text())["reviews"][0]["request_body"]
    template = recorded["request"]["object"]

    def replica(name: str, node: str) -> dict[str, Any]:
        metadata = {k: v for k, v in template["metadata"].items() if k != "generateName"}
        return {**template, "metadata": {**metadata, "name": name},
                "spec": {**template["spec"], "nodeName": node}}  # fmt: skip

    kube.seed(replica("web-7c9f8d6b5d-aaaaa", "node1"))
    async with service(nats_server, kubeconfig, kube) as running:
        ca = written_ca(kube)
        assert ca is not None

        async def warnings() -> list[str]:
            status, body = await post(running, json.dumps(recorded).encode(), ca)
            assert status == 200
            response = json.loads(body)["response"]
            assert response["patchType"] == "JSONPatch"
            found: list[str] = response.get("warnings", [])
            return found

        assert await warnings() == []  # 2 replicas, 3 hosts
        kube.write(replica("web-7c9f8d6b5d-bbbbb", "node2"))

        async def warned() -> bool:
            return bool(await warnings())

        await eventually_true(warned, "no warning once the replicas fill every host")
        [warning] = await warnings()
        assert warning.startswith("hostaffinity: no ESXi host to spare: 3 pod(s) (this one")
        assert "only 3 ESXi host(s) can take them" in warning
        kube.write({**kube.read("v1", "nodes", "node3"), "spec": {"unschedulable": True}})

        async def two_hosts() -> bool:
            return "only 2 ESXi host(s)" in "".join(await warnings())

        await eventually_true(two_hosts, "a cordoned host is not usable")
