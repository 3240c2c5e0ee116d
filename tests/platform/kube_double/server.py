"""The HTTP face of the double: authentication, discovery, routing a path to its resource, and
dispatch to the verbs -- reads (`reads`), watch (`watch`), writes (`writes`) -- and to what is
a resource's own (`registry/`), answering as kube-apiserver v1.36.2 answers.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from . import admission, discovery, errors, registry
from .auth import User, allowed, authenticate, forbidden, verb_of
from .faults import ObjectFault, PatchHold
from .journal import Exchange
from .reads import Reads, as_table
from .request import TRUE, Request, json_response, manager_of, object_key, read_body
from .resources import Resource, Route, lookup
from .store import Key, Store
from .watch import Watches
from .writes import Writes

if TYPE_CHECKING:
    from .webhooks import MutatingWebhooks


class KubeApiServer(Reads, Watches, Writes):
    """Serves the resources of `resources.py`; tests drive it through `KubeDouble`."""

    def __init__(
        self, *, store: Store, tokens: dict[str, User], time_scale: float, watch_progress: bool
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.time_scale = time_scale
        self.watch_progress = watch_progress
        self.holds: dict[tuple[str, Key], PatchHold] = {}
        self.watch_holds: dict[str, PatchHold] = {}
        self.faults: dict[tuple[str, Key], ObjectFault] = {}
        # Mutating admission webhooks on create, once a test turns them on (KubeDouble.
        # call_webhooks): most tests store what they send.
        self.mutating: MutatingWebhooks | None = None
        # Pod (anti-)affinity label keys merged into the selectors on create, as from v1.31;
        # False: dropped unmerged, as v1.28 to v1.30 (label_keys.py).
        self.merges_label_keys = True
        # Every request and its status, once a test asks (KubeDouble.record_requests).
        self.journal: list[Exchange] | None = None
        self._closing = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def close_watches(self) -> None:
        self._closing.set()

    @property
    def closing(self) -> asyncio.Event:
        """Set when the watch streams open now must end."""
        return self._closing

    def disconnect_watches(self) -> None:
        """End the streams open now; later watches start on a fresh signal."""
        self._closing.set()
        self._closing = asyncio.Event()

    async def _handle(self, http: web.Request) -> web.StreamResponse:
        try:
            response = await self._dispatch(http)
        except errors.ApiError as exc:
            response = json_response(exc.body, exc.code, exc.headers)
        if self.journal is not None:
            exchange = Exchange(http.method, http.path, dict(http.query), response.status)
            self.journal.append(exchange)
        return response

    async def _dispatch(self, http: web.Request) -> web.StreamResponse:
        user = authenticate(http.headers.get("Authorization"), self.tokens)
        if http.method == "GET" and (found := discovery.answer(http.path, http.host)) is not None:
            return json_response(found)
        query = dict(http.query)
        route = self._route(http.path)
        watch = http.method == "GET" and query.get("watch", "") in TRUE
        verb = verb_of(http.method, route, watch)
        if not allowed(user, verb, route.resource.plural):
            raise forbidden(user, verb, route)
        request = Request(route, query, manager_of(http, query), user, http)
        fault = self.faults.get((route.resource.storage_key, object_key(route, route.name or "")))
        if fault is not None and route.name is not None:
            await fault.apply()
        if route.resource.plural in ("selfsubjectreviews", "selfsubjectaccessreviews"):
            return await self._action(request)
        if route.subresource is not None and route.subresource not in route.resource.subresources:
            raise (
                errors.not_found(route.resource, route.name or "")
                if route.resource.custom
                else errors.resource_not_found()
            )
        if http.method == "GET" and route.name is None:
            if watch:
                return await self._watch(request)
            return json_response(as_table(request, await self._list(request)))
        if route.subresource == "scale":
            return await self._scale(request)
        if http.method == "GET":
            return json_response(self._get(request))
        if http.method == "POST" and route.subresource is not None:
            return await self._action(request)
        if http.method == "POST":
            body = await read_body(http)
            if self.mutating is not None:
                admission.check_decodable(route.resource, body)
                body = await self.mutating.admit(route.resource, body, route.namespace, user.name)
            return json_response(self._create(request, body), 201)
        if http.method == "PUT":
            return json_response(self._update(request, await read_body(http)))
        if http.method == "PATCH":
            return await self._patch(request)
        if http.method == "DELETE":
            return json_response(self._delete(request))
        raise errors.status(405, "MethodNotAllowed", "the server does not allow this method")

    async def _action(self, request: Request) -> web.Response:
        """A subresource that is an action, or a review: the resource's own (registry/)."""
        body = await read_body(request.http)
        answer = registry.create_subresource(self.store, self.tokens, request, body)
        return json_response(answer, 201)

    def _route(self, path: str) -> Route:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.resource_not_found()
        if group in ("authentication.k8s.io", "authorization.k8s.io") and rest:
            review = Resource(group, version, rest[0], "", False)
            return Route(review, None, None)
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and lookup(group, version, rest[2]):
            namespace, rest = rest[1], rest[2:]
        resource = lookup(group, version, rest[0]) if rest else None
        if (
            resource is None
            or len(rest) > 3
            or (resource.namespaced and len(rest) > 1 and namespace is None)
        ):
            raise errors.resource_not_found()
        return Route(
            resource,
            namespace,
            rest[1] if len(rest) > 1 else None,
            rest[2] if len(rest) > 2 else None,
        )

    # A JSON answer; kept on the class for what serves the double through its own app
    # (tests/campaign/recording.py).
    _json = staticmethod(json_response)
