"""The HTTP server kube-scheduler calls: POST /filter, /prioritize and /bind (optionally TLS).

Handlers decode, ask `answers` (or the binder), record latency and outcome, offer the decision to
the sampled event publisher, and answer. Every answer is HTTP 200 with the verb's JSON, except a
body that does not decode (400 with a short reason), a body over `max_body_bytes` (413), and
prioritize while the cache is unsynced (503): its answer type has no Error field, and
kube-scheduler ignores a prioritize that fails. Every refused request, whatever refused it (the
router's 404/405 and aiohttp's 413 included), is counted by status.

A filter whose own host-level terms select an in-flight pod without a reservation first waits for
that pod's placement, at most `inflight_wait_seconds`; then the pod is dropped from the in-flight
set and the filter decides without it.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.scheduler_extender.binder import Binder, BindError
from hostaffinity.scheduler_extender.config import ExtenderSettings
from hostaffinity.scheduler_extender.core import answers, extender_v1
from hostaffinity.scheduler_extender.core.answers import Verdict
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.core.extender_v1 import MalformedRequest
from hostaffinity.scheduler_extender.decision_events import decision_event
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics
from hostaffinity.schema import EventFactory

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
VERB_PATHS = frozenset({"/filter", "/prioritize", "/bind"})

_log = logging.getLogger(__name__)
# Where a caller names none (tests), the config's own defaults.
_DEFAULTS = ExtenderSettings()


def server_tls(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """A server TLS context when a certificate is configured, else None (plain HTTP)."""
    if cert_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


def _path_label(request: web.Request) -> str:
    """The verb's path, or `other`: a caller must not be able to mint metric labels."""
    return request.path if request.path in VERB_PATHS else "other"


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _error(message: str, status: int) -> web.Response:
    # {"Error": "..."}: the shape every extender answer uses for a failure.
    return _json(extender_v1.encode(extender_v1.ExtenderBindingResult(error=message)), status)


class ExtenderServer:
    """Serves the three verbs over one cache; `port` is the bound port once started."""

    def __init__(
        self,
        cache: ExtenderCache,
        binder: Binder,
        metrics: ExtenderMetrics,
        decisions: SampledPublisher,
        event_factory: EventFactory,
        *,
        max_body_bytes: int = _DEFAULTS.max_body_bytes,
        inflight_wait_seconds: float = _DEFAULTS.inflight_wait_seconds,
        rng: random.Random | None = None,
    ) -> None:
        self._cache = cache
        self._binder = binder
        self._metrics = metrics
        self._decisions = decisions
        self._event_factory = event_factory
        self._max_body = max_body_bytes
        self._inflight_wait = inflight_wait_seconds
        self._rng = rng or random.Random()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self._max_body, middlewares=[self._count_refused])
        app.router.add_post("/filter", self._filter)
        app.router.add_post("/prioritize", self._prioritize)
        app.router.add_post("/bind", self._bind)
        return app

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, ssl_context=tls).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Finish the requests in flight, then close."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _count_refused(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as refused:
            self._metrics.refused(_path_label(request), refused.status)
            raise
        except Exception:
            self._metrics.refused(_path_label(request), 500)
            raise
        if response.status >= 400:
            self._metrics.refused(_path_label(request), response.status)
        return response

    def _answered(self, verb: str, pod: str, uid: str, verdict: Verdict, started: float) -> None:
        self._metrics.answered(verb, verdict.outcome, time.perf_counter() - started)
        self._decisions.offer(
            uid or pod, lambda: decision_event(self._event_factory, verb, pod, uid, verdict)
        )

    async def _filter(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            pod, asked = extender_v1.decode_args(await request.read())
        except MalformedRequest as error:
            return self._bad_request("filter", error, started)
        self._cache.note_incoming(pod)
        selected = answers.in_flight_selected(self._cache, pod)
        if selected:
            waited = time.perf_counter()
            late = await self._cache.in_flight.settled(selected, self._inflight_wait)
            self._cache.give_up(late)
            self._metrics.waited(time.perf_counter() - waited, len(late))
        answer, verdict = answers.filter_nodes(self._cache, pod, asked, self._rng)
        self._answered("filter", pod.key, pod.metadata.uid, verdict, started)
        return _json(extender_v1.encode(answer))

    async def _prioritize(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            pod, asked = extender_v1.decode_args(await request.read())
        except MalformedRequest as error:
            return self._bad_request("prioritize", error, started)
        priorities, verdict = answers.prioritize(self._cache, pod, asked)
        self._answered("prioritize", pod.key, pod.metadata.uid, verdict, started)
        if priorities is None:
            return _error(verdict.message, 503)
        return _json(extender_v1.encode(priorities))

    async def _bind(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            args = extender_v1.decode_binding(await request.read())
        except MalformedRequest as error:
            return self._bad_request("bind", error, started)
        pod = f"{args.pod_namespace}/{args.pod_name}"
        try:
            await self._binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except BindError as error:
            _log.warning("%s", error)
            verdict = Verdict(outcome=answers.ERROR, asked=1, node=args.node, message=str(error))
            answer = extender_v1.ExtenderBindingResult(error=str(error))
        else:
            # Before answering: the next filter kube-scheduler sends must see this placement.
            self._cache.assume(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
            verdict = Verdict(outcome=answers.BOUND, asked=1, passed=1, node=args.node)
            answer = extender_v1.ExtenderBindingResult()
        self._answered("bind", pod, args.pod_uid, verdict, started)
        return _json(extender_v1.encode(answer))

    def _bad_request(self, verb: str, error: Exception, started: float) -> web.Response:
        self._metrics.answered(verb, answers.ERROR, time.perf_counter() - started)
        return _error(f"malformed {verb} request: {error}", 400)
