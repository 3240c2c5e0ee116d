"""`POST /mutate`: the admission webhook over HTTPS, on its own port.

Never blocks pod creation: a body that is not an AdmissionReview gets 400 (the API server then
applies `failurePolicy: Ignore` and creates the pod unpatched), a pod the planner cannot read is
allowed with a warning, and everything else is allowed with or without a patch. A review costs
a decode, the planner and an encode, all in the request; the sampled `pod.mutated` event is
queued for publishing off the request path and never for a dry run (`sideEffects: None`).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hostaffinity.admission_webhook.core.admission_v1 import (
    AdmissionReview,
    created_pod,
    decode_review,
    encode_answer,
    mutation_for,
)
from hostaffinity.admission_webhook.core.fleet_affinity import with_fleet_terms
from hostaffinity.admission_webhook.core.mutation import Mutation, MutationSettings, Outcome
from hostaffinity.admission_webhook.metrics import AdmissionMetrics
from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.schema import UNDECODABLE, Event, EventFactory, PodMutated

_log = logging.getLogger(__name__)
MUTATE_PATH = "/mutate"
OfferEvent = Callable[[str, Callable[[], Event]], None]
# Warnings about the pod under review beyond the patch's own (headroom.HostHeadroomAdvisor).
Advise = Callable[[dict[str, Any]], list[str]]
# The API server gives up on a review after the configuration's timeoutSeconds (2 s as shipped):
# on stop, waiting longer for a review in flight helps nobody.
SHUTDOWN_SECONDS = 3.0


def _pod_reference(obj: dict[str, Any] | None, namespace: str) -> tuple[str, str]:
    """namespace/name (generateName when the name is not set yet) and the controlling owner.
    The object is what the client sent: a field of another type than the Pod schema's counts
    as absent here (the API server refuses such a pod after admission anyway)."""
    metadata = _field(obj, "metadata", dict) or {}
    name = _field(metadata, "name", str) or _field(metadata, "generateName", str) or ""
    owner = next(
        (
            f"{o.get('kind', '')}/{o.get('name', '')}"
            for o in _field(metadata, "ownerReferences", list) or ()
            if isinstance(o, dict) and o.get("controller")
        ),
        "",
    )
    return f"{namespace}/{name}", owner


def _field(obj: object, key: str, kind: type) -> Any:
    """`obj[key]` when obj is an object and the value has `kind`, else None."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, kind) else None


def mutated_event(
    event_factory: EventFactory, review: AdmissionReview, mutation: Mutation
) -> PodMutated:
    """The `pod.mutated` event for one admitted pod."""
    request = review.request
    pod, owner = _pod_reference(request.object, request.namespace)
    return event_factory.new(
        PodMutated,
        request.uid,
        pod=pod,
        request_uid=request.uid,
        owner=owner,
        twins=mutation.twins,
        host_label_required=mutation.host_label_required,
        spread_added=mutation.spread_added,
        warnings=mutation.warnings,
        spreads_moved=mutation.spreads_moved,
    )


class AdmissionWebhook:
    """The HTTPS server answering kube-apiserver's admission reviews."""

    def __init__(
        self,
        settings: MutationSettings,
        metrics: AdmissionMetrics,
        offer_event: OfferEvent,
        event_factory: EventFactory,
        *,
        max_body_bytes: int,
        advise: Advise | None = None,
        fleet: FleetMembers | None = None,
    ) -> None:
        self._settings = settings
        self._advise = advise
        # Other clusters' fleet group members (the fleet view), for fleet_affinity.py.
        self._fleet = fleet or FleetMembers("")
        self._metrics = metrics
        self._offer_event = offer_event
        self._event_factory = event_factory
        self._max_body_bytes = max_body_bytes
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def serving(self) -> bool:
        return self._runner is not None

    async def start(self, host: str, port: int, tls: ssl.SSLContext) -> None:
        app = web.Application(client_max_size=self._max_body_bytes)
        app.router.add_post(MUTATE_PATH, self._mutate)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_SECONDS
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, ssl_context=tls).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop taking reviews; the ones in flight are answered first."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _mutate(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            review = decode_review(await request.read())
        except UNDECODABLE as error:  # bad JSON, invalid UTF-8, nesting too deep, wrong types
            self._metrics.reviewed(Outcome.REFUSED, time.perf_counter() - started)
            reason = "JSON nested too deeply" if isinstance(error, RecursionError) else error
            return web.Response(status=400, text=f"not an AdmissionReview: {reason}\n")
        mutation = with_fleet_terms(
            mutation_for(review, self._settings), created_pod(review), self._fleet
        )
        advice = self._advice(review)
        body = encode_answer(review, mutation, advice)
        self._metrics.reviewed(mutation.outcome, time.perf_counter() - started)
        if mutation.warnings:
            _log.warning("review %s: %s", review.request.uid, "; ".join(mutation.warnings))
        if mutation.operations and not review.request.dry_run:
            self._offer_event(
                review.request.uid, lambda: mutated_event(self._event_factory, review, mutation)
            )
        return web.Response(body=body, content_type="application/json")

    def _advice(self, review: AdmissionReview) -> list[str]:
        """The advisor's warnings for a pod being created (it is never asked about others)."""
        pod = created_pod(review)
        return [] if self._advise is None or pod is None else self._advise(pod)
