"""Who did what: the API double recording every request and write with its actor, and the TCP
proxies that tell the double (and the campaign) which service process a connection belongs to.

Services set no User-Agent of their own (kubernetes_asyncio's `OpenAPI-Generator/...` for all),
so the actor is found from the connection: each replica reaches the API through its own
`AttributedProxy`, which notes the local port of every upstream connection it opens together
with the Lease identity of the process now behind it (`<hostname>-<pid>`). The double's
middleware maps the request's peer port back to that identity; the store's writes inherit it
through a context variable, since the double writes inside the request's task.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any
from xml.etree import ElementTree

from aiohttp import web

from tests.campaign.drs_writes import parse_reconfigure, touches
from tests.campaign.history import (
    CAMPAIGN,
    RECONFIGURE,
    UNPARSED,
    ApiRequest,
    Clock,
    DrsTouch,
    History,
    StoredChange,
    VcenterWrite,
)
from tests.platform.kube_double import KubeDouble, ObjectFault, errors
from tests.platform.kube_double.resources import RESOURCES
from tests.platform.kube_double.server import KubeApiServer
from tests.platform.kube_double.store import Change
from tests.platform.tcp_proxy import TcpProxy

_ACTOR: contextvars.ContextVar[str] = contextvars.ContextVar("actor", default=CAMPAIGN)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Connections:
    """Local port of each proxied upstream connection → the identity that opened it."""

    def __init__(self) -> None:
        self.by_port: dict[int, str] = {}

    def actor(self, port: int) -> str:
        return self.by_port.get(port, CAMPAIGN)


class AttributedProxy(TcpProxy):
    """One replica's proxy to one upstream; `identity()` names the process behind it now."""

    def __init__(
        self, upstream: tuple[str, int], connections: Connections, identity: Callable[[], str]
    ) -> None:
        super().__init__(*upstream)
        self._connections = connections
        self._identity = identity

    async def _client_to_server(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        self._connections.by_port[sink.get_extra_info("sockname")[1]] = self._identity()
        await super()._client_to_server(source, sink)


class VcenterProxy(AttributedProxy):
    """Also notes every DRS reconfigure a replica sends to vCenter, with what it touches: each
    HTTP request is let through once read whole, a reconfigure that addresses rules by key only
    after `rule_names` has asked vCenter what it holds under those keys (drs_writes.py)."""

    def __init__(
        self,
        upstream: tuple[str, int],
        connections: Connections,
        identity: Callable[[], str],
        history: History,
        clock: Clock,
        rule_names: Callable[[str], Awaitable[dict[int, str] | None]],
    ) -> None:
        super().__init__(upstream, connections, identity)
        self._history = history
        self._clock = clock
        self._rule_names = rule_names

    async def _client_to_server(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        watched = asyncio.StreamReader()

        async def frame() -> None:
            pending = b""
            try:
                while data := await source.read(65536):
                    pending += data
                    while (size := _request_size(pending)) is not None:
                        await self._note(pending[:size])
                        watched.feed_data(pending[:size])
                        pending = pending[size:]
                watched.feed_data(pending)
            finally:
                watched.feed_eof()

        framing = asyncio.create_task(frame())
        try:
            await super()._client_to_server(watched, sink)
        finally:
            framing.cancel()

    async def _note(self, request: bytes) -> None:
        t, actor = self._clock.now(), self._identity()
        try:
            reconfigure = parse_reconfigure(request.partition(b"\r\n\r\n")[2])
        except ElementTree.ParseError as error:
            unparsed = DrsTouch(UNPARSED, f"not readable as SOAP: {error}")
            self._history.vcenter_writes.append(
                VcenterWrite(t, actor, RECONFIGURE, "", (unparsed,))
            )
            return
        if reconfigure is None:
            return
        names = await self._rule_names(reconfigure.cluster) if reconfigure.rule_keys else {}
        touched, unresolved = touches(reconfigure, names)
        self._history.vcenter_writes.append(
            VcenterWrite(t, actor, RECONFIGURE, reconfigure.cluster, touched, unresolved)
        )


def _request_size(pending: bytes) -> int | None:
    """The length of the whole HTTP request at the start of `pending` (its head and its
    Content-Length of body, as pyVmomi sends every call), or None while it is incomplete."""
    head, found, _ = pending.partition(b"\r\n\r\n")
    if not found:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        field, _, value = line.partition(b":")
        if field.strip().lower() == b"content-length":
            length = int(value.strip())
    size = len(head) + 4 + length
    return size if len(pending) >= size else None


class RecordingDouble(KubeDouble):
    """The Kubernetes double with every request and write in the history, and one fault that
    applies to every request a service makes (held, slow, 500 as the double's `ObjectFault`,
    or 429 while `throttled`)."""

    def __init__(self, history: History, clock: Clock, connections: Connections) -> None:
        super().__init__(history_limit=200_000)
        self.history = history
        self.clock = clock
        self.connections = connections
        self.api_fault = ObjectFault()
        self.throttled = False
        # Storage -> the revision of its last change (what a reader caching it compares).
        self.latest: dict[str, int] = {}
        self.server.app = self._app  # type: ignore[method-assign]
        for storage in sorted({r.storage_key for r in RESOURCES}):
            _, subscription = self.store.subscribe(storage, self.store.rv)
            subscription.queue = _Stamping(self)  # type: ignore[assignment]

    def _app(self) -> web.Application:
        app = KubeApiServer.app(self.server)
        app.middlewares.append(self._middleware)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        actor = self.connections.actor(peer[1]) if peer else CAMPAIGN
        _ACTOR.set(actor)
        arrived = self.clock.now()
        status = 0
        try:
            if actor != CAMPAIGN:
                await self._fault()
            response = await handler(request)
            status = response.status
            return response
        except errors.ApiError as exc:
            status = exc.code
            return KubeApiServer._json(exc.body, exc.code, exc.headers)
        finally:
            self.history.requests.append(
                ApiRequest(arrived, actor, request.method, request.path, status)
            )

    async def _fault(self) -> None:
        await self.api_fault.apply()
        if self.throttled:
            raise errors.status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                {"retryAfterSeconds": 1},
                headers={"Retry-After": "1"},
            )


class _Stamping(asyncio.Queue[Change]):
    """Stands in for a watch subscription's queue: records each change with time and actor."""

    def __init__(self, double: RecordingDouble) -> None:
        super().__init__()
        self._double = double

    def put_nowait(self, item: Any) -> None:
        change: Change = item
        self._double.latest[change.storage] = change.rv
        self._double.history.changes.append(
            StoredChange(
                self._double.clock.now(),
                _ACTOR.get(),
                change.rv,
                change.storage,
                change.type,
                change.obj,
                change.prev,
            )
        )
