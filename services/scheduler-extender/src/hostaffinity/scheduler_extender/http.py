"""The HTTP server kube-scheduler calls: POST /filter, /prioritize and /bind (optionally TLS).

Handlers decode, ask `decide` (or the binder), record latency and outcome, offer the decision to
the sampled event publisher, and answer. Every answer is HTTP 200 with the verb's JSON, except a
body that does not decode (400) and prioritize while the cache is unsynced (503): its answer type
has no Error field, and kube-scheduler ignores a prioritize that fails.
"""

from __future__ import annotations

import logging
import ssl
import time

import msgspec
from aiohttp import web

from hostaffinity.scheduler_extender import decide, wire
from hostaffinity.scheduler_extender.binder import Binder, BindError
from hostaffinity.scheduler_extender.cache import ExtenderCache
from hostaffinity.scheduler_extender.decide import Verdict
from hostaffinity.scheduler_extender.decisions import DecisionPublisher
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics

_log = logging.getLogger(__name__)


def server_tls(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """A server TLS context when a certificate is configured, else None (plain HTTP)."""
    if cert_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _error(message: str, status: int) -> web.Response:
    # {"Error": "..."}: the shape every extender answer uses for a failure.
    return _json(wire.encode(wire.ExtenderBindingResult(error=message)), status)


class ExtenderServer:
    """Serves the three verbs over one cache; `port` is the bound port once started."""

    def __init__(
        self,
        cache: ExtenderCache,
        binder: Binder,
        metrics: ExtenderMetrics,
        decisions: DecisionPublisher,
    ) -> None:
        self._cache = cache
        self._binder = binder
        self._metrics = metrics
        self._decisions = decisions
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
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

    def _answered(self, verb: str, pod: str, uid: str, verdict: Verdict, started: float) -> None:
        self._metrics.answered(verb, verdict.outcome, time.perf_counter() - started)
        self._decisions.offer(verb, pod, uid, verdict)

    async def _filter(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            pod, asked = wire.decode_args(await request.read())
        except msgspec.DecodeError as error:
            return self._bad_request("filter", error, started)
        self._cache.note_incoming(pod)
        answer, verdict = decide.filter_nodes(self._cache, pod, asked)
        self._answered("filter", pod.key, pod.metadata.uid, verdict, started)
        return _json(wire.encode(answer))

    async def _prioritize(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            pod, asked = wire.decode_args(await request.read())
        except msgspec.DecodeError as error:
            return self._bad_request("prioritize", error, started)
        priorities, verdict = decide.prioritize(self._cache, pod, asked)
        self._answered("prioritize", pod.key, pod.metadata.uid, verdict, started)
        if priorities is None:
            return _error(verdict.message, 503)
        return _json(wire.encode(priorities))

    async def _bind(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            args = wire.decode_binding(await request.read())
        except msgspec.DecodeError as error:
            return self._bad_request("bind", error, started)
        pod = f"{args.pod_namespace}/{args.pod_name}"
        try:
            await self._binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except BindError as error:
            _log.warning("%s", error)
            verdict = Verdict(outcome=decide.ERROR, asked=1, node=args.node, message=str(error))
            answer = wire.ExtenderBindingResult(error=str(error))
        else:
            # Before answering: the next filter kube-scheduler sends must see this placement.
            self._cache.assume(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
            verdict = Verdict(outcome=decide.BOUND, asked=1, passed=1, node=args.node)
            answer = wire.ExtenderBindingResult()
        self._answered("bind", pod, args.pod_uid, verdict, started)
        return _json(wire.encode(answer))

    def _bad_request(self, verb: str, error: Exception, started: float) -> web.Response:
        self._metrics.answered(verb, decide.ERROR, time.perf_counter() - started)
        return _error(f"malformed {verb} request: {error}", 400)
