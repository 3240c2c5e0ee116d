"""The admission-webhook's work (the runner does the rest): TLS, the server, the caBundle, the
`pod.mutated` publisher, the twinless-pod reporter and the host-headroom advisor (one pod watch
feeds both; a node watch feeds the advisor).

The certificate (a Secret cert-manager has not issued yet, RBAC not applied, the namespace
missing), the port and the caBundle (the MutatingWebhookConfiguration may be applied after the
service starts) are each retried in the background until they succeed, and logged while they do
not. Until then the API server cannot reach or verify us and, with `failurePolicy: Ignore`, admits
pods unpatched -- the twinless-pod reporter counts them. Readiness names the two parts that
serve: the webhook listening (the Service sends reviews to ready replicas only) and registered
(its caBundle written); the spec declares them up front (`readiness_parts`), so /readyz is not
200 before the work has added them. When cancelled (SIGTERM) the server stops taking reviews and
answers the ones in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hostaffinity.admission_webhook.config import AdmissionWebhookConfig, WebhookSettings
from hostaffinity.admission_webhook.core.headroom import HostHeadroomAdvisor
from hostaffinity.admission_webhook.core.mutation import MutationSettings
from hostaffinity.admission_webhook.http import AdmissionWebhook
from hostaffinity.admission_webhook.metrics import AdmissionMetrics
from hostaffinity.admission_webhook.registration import RegistrationError, WebhookRegistration
from hostaffinity.admission_webhook.twinless import (
    PodAdmission,
    TwinlessPods,
    pod_admission_decoder,
)
from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Pod, decode_node, decode_pod
from hostaffinity.runtime.bus.fleet_view import follow_fleet_view
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.http.certificates import server_context, service_hostnames
from hostaffinity.runtime.kube.client import CALL_ERRORS, NODES, PODS, KubeClient
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.informer import Informer, InformerEvent, upsert_or_remove
from hostaffinity.runtime.process.config import SharedSettings
from hostaffinity.runtime.runner import ServiceContext

_log = logging.getLogger(__name__)
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
T = TypeVar("T")
LISTENING = "webhook listening"
REGISTERED = "webhook registered"


def readiness_parts(_config: AdmissionWebhookConfig) -> list[str]:
    """Every part of /readyz the work adds (the spec declares them up front)."""
    return [LISTENING, REGISTERED]


def mutation_settings(shared: SharedSettings, webhook: WebhookSettings) -> MutationSettings:
    """The planner's settings from the shared section (same reading as the engine's)."""
    return MutationSettings(
        physical_anti_affinity=shared.physical_anti_affinity,
        fail_unplaced=shared.fails_unplaced,
        spread_when_unsatisfiable=webhook.spread_when_unsatisfiable,
    )


def _watched_pods(
    client: KubeClient, settings: MutationSettings, reporter: TwinlessPods, index: ClusterIndex
) -> Informer[tuple[PodAdmission, Pod]]:
    """One pod watch for both readers: the twinless-pod reporter and the headroom index."""
    admission = pod_admission_decoder(settings)
    indexed = upsert_or_remove(index.upsert_pod, index.remove_pod)

    def decode(raw: bytes) -> tuple[PodAdmission, Pod]:
        return admission(raw), decode_pod(raw)

    async def handle(event: InformerEvent[tuple[PodAdmission, Pod]]) -> None:
        record, pod = event.obj
        await reporter.handle(InformerEvent(event.type, event.key, record))
        await indexed(InformerEvent(event.type, event.key, pod))

    return Informer(client, PODS, handle, decode)


def _file_context(settings: WebhookSettings) -> ssl.SSLContext:
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        raise RegistrationError("webhook.certificates is 'files' but no tls_cert_file/key_file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    return context


async def _retrying(what: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()` until it succeeds, backing off; the reason is logged each time."""
    for count in itertools.count():
        try:
            return await attempt()
        except (RegistrationError, *CALL_ERRORS) as error:  # ssl.SSLError is an OSError
            delay = RETRY_SECONDS[min(count, len(RETRY_SECONDS) - 1)]
            _log.warning(
                "admission webhook: %s failed (%s); retrying in %.0f s", what, error, delay
            )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _serve(
    webhook: AdmissionWebhook,
    settings: WebhookSettings,
    registration: WebhookRegistration | None,
    registered: asyncio.Event,
) -> None:
    """Listen, then (self-signed) write the CA kube-apiserver must trust; `registered` is set
    once kube-apiserver can call the webhook."""
    if registration is None:

        async def from_files() -> ssl.SSLContext:
            return _file_context(settings)

        context = await _retrying("loading the certificate files", from_files)
        ca_pem = None
    else:
        identity = await _retrying(
            "settling the serving certificate", registration.serving_identity
        )
        context, ca_pem = server_context(identity), identity.ca_pem
    await _retrying("listening", lambda: webhook.start(settings.host, settings.port, context))
    _log.info("admission webhook listening on port %d", webhook.port)
    if registration is not None and ca_pem is not None:
        await _retrying("writing the caBundle", lambda: registration.publish_ca(ca_pem))
    registered.set()


def _registration(ctx: ServiceContext[AdmissionWebhookConfig]) -> WebhookRegistration:
    """The self-signed path: the identity's Secret and the configuration to write its CA into."""
    settings, namespace = ctx.config.webhook, ctx.config.kubernetes.namespace
    return WebhookRegistration(
        ctx.kube,
        namespace=namespace,
        secret_name=settings.secret_name,
        configuration_name=settings.configuration_name,
        hostnames=[*service_hostnames(settings.service_name, namespace), *settings.extra_hostnames],
    )


class AdmissionWebhookWork:
    """Serves admission reviews until cancelled; the server stays visible for tests."""

    def __init__(self) -> None:
        self.server: AdmissionWebhook | None = None

    async def __call__(self, ctx: ServiceContext[AdmissionWebhookConfig]) -> None:
        settings, client = ctx.config.webhook, ctx.kube
        mutation = mutation_settings(ctx.config.shared, settings)
        reporter = TwinlessPods(EventRecorder(client, ctx.program, ctx.identity))
        metrics = AdmissionMetrics(reporter.count)
        publisher = SampledPublisher(
            ctx.service,
            ctx.bus.publish_event,
            ratio=settings.event_sample_ratio,
            capacity=settings.event_queue_size,
        )
        advisor = HostHeadroomAdvisor(mutation)
        fleet = FleetMembers(ctx.cluster.name)
        server = self.server = AdmissionWebhook(
            mutation,
            metrics,
            publisher.offer,
            ctx.event_factory,
            max_body_bytes=settings.max_body_bytes,
            advise=advisor.warnings,
            fleet=fleet,
        )
        ctx.add_readiness(LISTENING, lambda: server.serving)
        # Not ready while kube-apiserver cannot verify the webhook yet: a replica that cannot
        # write its caBundle (RBAC, a missing configuration) is reported, not counted on.
        registered = asyncio.Event()
        ctx.add_readiness(REGISTERED, registered.is_set)
        registration = _registration(ctx) if settings.certificates == "self-signed" else None
        pods = _watched_pods(client, mutation, reporter, advisor.index)
        index = advisor.index
        nodes = Informer(client, NODES, upsert_or_remove(index.upsert_node, index.remove_node),
                         decode_node)  # fmt: skip
        ctx.start(publisher.run(), name="pod-mutated-publisher")
        ctx.start(follow_fleet_view(ctx.bus.js, fleet, link=ctx.bus.link_epoch), name="fleet-view")
        ctx.start(pods.run(), name="watched-pods")
        ctx.start(nodes.run(), name="watched-nodes")
        try:
            await _serve(server, settings, registration, registered)
            await asyncio.Event().wait()  # serve until cancelled
        finally:
            _log.info("stopping: answering reviews in flight")
            await server.stop()
