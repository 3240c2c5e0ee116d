"""The HTTP face of the double: routing, auth, and the generic verbs (list, watch, get, create,
update, patch, delete) over the Store, answering as kube-apiserver v1.36.2 answers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web

from . import admission, discovery, errors, fieldsets, patches, protobuf, scale, tables
from .actions import SubresourceActions
from .auth import User, allowed, authenticate, forbidden, verb_of
from .journal import Exchange
from .label_keys import prepare_pod_affinity
from .registry import PRINTERS
from .resources import Resource, Route, lookup
from .selectors import Matcher, field_matcher, label_matcher
from .store import Change, Key, Store, TooOld

if TYPE_CHECKING:
    from .webhooks import MutatingWebhooks

_TRUE = frozenset({"1", "t", "T", "true", "True", "TRUE"})
_BUILTIN_PATCH_TYPES = (
    "application/json-patch+json, application/merge-patch+json, "
    "application/apply-patch+yaml, application/strategic-merge-patch+json"
)
_CUSTOM_PATCH_TYPES = (
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
_BOOKMARK_EVERY_S = 60.0
_TYPE = ("kind", "apiVersion")  # a built-in LIST's items carry neither
_CONSISTENT_READ_WAIT_S = 3.0


@dataclass
class PatchHold:
    """Holds PATCH requests on one object until released (a test proves nobody waited)."""

    released: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0

    def release(self) -> None:
        self.released.set()


@dataclass
class ObjectFault:
    """What an unhealthy apiserver does to every request on one object, whatever the verb:
    hold it until released (etcd stalled), delay it (overloaded), or answer 500 InternalError
    (etcd unreachable). A held or delayed request is still carried out afterwards, as a real
    server finishes a request its client has given up on."""

    delay_s: float = 0.0
    failing: bool = False
    held: bool = False
    requests: int = 0
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def hold(self) -> None:
        self.held = True
        self._released.clear()

    def release(self) -> None:
        self.held = False
        self._released.set()

    def clear(self) -> None:
        """Healthy again: no delay, no failure, nothing held."""
        self.delay_s, self.failing = 0.0, False
        self.release()

    async def apply(self) -> None:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.held:
            await self._released.wait()
        if self.failing:
            # apimachinery/pkg/api/errors/errors.go NewInternalError: message, reason, causes.
            cause = "etcdserver: request timed out"
            raise errors.status(
                500,
                "InternalError",
                f"Internal error occurred: {cause}",
                {"causes": [{"message": cause}]},
            )


@dataclass
class Request:
    """What the verbs need from one HTTP request."""

    route: Route
    query: dict[str, str]
    manager: str
    user: User
    http: web.Request


def _manager(request: web.Request, query: dict[str, str]) -> str:
    """Update managers default to the User-Agent's product token (`OpenAPI-Generator/...`)."""
    if query.get("fieldManager"):
        return query["fieldManager"]
    return request.headers.get("User-Agent", "unknown").split("/")[0].split(" ")[0]


def _key(route: Route, name: str) -> Key:
    return (route.namespace or "", name)


def _continue_token(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    """Decode like apimachinery's storage.DecodeContinue, with the same error wording."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as exc:
        raise errors.bad_request(f"invalid continue token: {exc}") from exc
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        first = raw.lstrip()[:1]
        char = chr(first[0]) if first else ""
        shown = char if char.isprintable() and ord(char) < 128 else f"\\x{ord(char):02x}"
        raise errors.bad_request(
            "invalid continue token: continue key is not valid: invalid character "
            f"'{shown}' looking for beginning of value"
        ) from exc
    return int(data["rv"]), str(data["start"]).lstrip("/")


def _strip_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    out["metadata"].pop("resourceVersion", None)
    return out


def _spec_changed(resource: Resource, old: dict[str, Any], new: dict[str, Any]) -> bool:
    if resource.custom and not resource.status_subresource:
        return {k: v for k, v in old.items() if k != "metadata"} != {
            k: v for k, v in new.items() if k != "metadata"
        }
    return old.get("spec") != new.get("spec")


class KubeApiServer:
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
        self.actions = SubresourceActions(self)
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

    # -- plumbing ----------------------------------------------------------------------------

    async def _handle(self, http: web.Request) -> web.StreamResponse:
        try:
            response = await self._dispatch(http)
        except errors.ApiError as exc:
            response = self._json(exc.body, exc.code, exc.headers)
        if self.journal is not None:
            exchange = Exchange(http.method, http.path, dict(http.query), response.status)
            self.journal.append(exchange)
        return response

    async def _dispatch(self, http: web.Request) -> web.StreamResponse:
        user = authenticate(http.headers.get("Authorization"), self.tokens)
        if http.method == "GET" and (found := discovery.answer(http.path, http.host)) is not None:
            return self._json(found)
        query = dict(http.query)
        route = self._route(http.path)
        watch = http.method == "GET" and query.get("watch", "") in _TRUE
        verb = verb_of(http.method, route, watch)
        if not allowed(user, verb, route.resource.plural):
            raise forbidden(user, verb, route)
        request = Request(route, query, _manager(http, query), user, http)
        fault = self.faults.get((route.resource.storage_key, _key(route, route.name or "")))
        if fault is not None and route.name is not None:
            await fault.apply()
        if route.resource.plural in ("selfsubjectreviews", "selfsubjectaccessreviews"):
            return self._created(await self.actions.review(request, await self._body(http)))
        if route.subresource is not None and route.subresource not in route.resource.subresources:
            raise (
                errors.not_found(route.resource, route.name or "")
                if route.resource.custom
                else errors.resource_not_found()
            )
        if http.method == "GET" and route.name is None:
            if watch:
                return await self._watch(request)
            return self._json(self._as_table(request, await self._list(request)))
        if route.subresource == "scale":
            return await self._scale(request)
        if http.method == "GET":
            return self._json(self._as_table(request, self._present(route, self._get(route))))
        if http.method == "POST" and route.subresource is not None:
            status, body = await self.actions.create(request, await self._body(http))
            return self._json(body, status)
        if http.method == "POST":
            body = await self._body(http)
            if self.mutating is not None:
                admission.check_decodable(route.resource, body)
                body = await self.mutating.admit(route.resource, body, route.namespace, user.name)
            return self._created(self._create(request, body))
        if http.method == "PUT":
            return self._json(self._update(request, await self._body(http)))
        if http.method == "PATCH":
            return await self._patch(request)
        if http.method == "DELETE":
            return self._json(self._delete(request))
        raise errors.status(405, "MethodNotAllowed", "the server does not allow this method")

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

    @staticmethod
    async def _body(http: web.Request) -> Any:
        if http.content_type == protobuf.CONTENT_TYPE:
            return protobuf.decode(await http.read())
        text = await http.text()
        if not text:
            return {}
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            if http.content_type == "application/apply-patch+yaml":
                return text
            raise errors.bad_request("couldn't get version/kind; json parse error") from None

    @staticmethod
    def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
        # Exactly `application/json`, without aiohttp's `; charset=utf-8`, as the server sends.
        return web.Response(
            body=json.dumps(body).encode(),
            status=status,
            headers={"Content-Type": "application/json", **(headers or {})},
        )

    def _created(self, body: Any) -> web.Response:
        return self._json(body, 201)

    @staticmethod
    def _present(route: Route, obj: dict[str, Any]) -> dict[str, Any]:
        return admission.present(route.resource, obj)

    @staticmethod
    def _as_table(request: Request, answer: dict[str, Any]) -> dict[str, Any]:
        """A list or an object, or its Table when the client asks for one and the resource
        has printer columns (tables.py)."""
        printer = PRINTERS.get(request.route.resource.storage_key)
        if printer is None or not tables.wants_table(request.http.headers.get("Accept", "")):
            return answer
        if "items" in answer:
            return tables.table(printer, answer["items"], answer["metadata"])
        meta = {"resourceVersion": answer["metadata"].get("resourceVersion", "")}
        return tables.table(printer, [answer], meta)

    def _get(self, route: Route) -> dict[str, Any]:
        obj = self.store.get(route.resource.storage_key, _key(route, route.name or ""))
        if obj is None:
            raise errors.not_found(route.resource, route.name or "")
        return obj

    # -- reads -------------------------------------------------------------------------------

    def _matcher(self, request: Request) -> Matcher:
        labels = label_matcher(request.query.get("labelSelector"))
        fields = field_matcher(
            request.query.get("fieldSelector"), request.route.resource.field_labels
        )
        return lambda obj: labels(obj) and fields(obj)

    async def _list(self, request: Request) -> dict[str, Any]:
        route, query = request.route, request.query
        storage = route.resource.storage_key
        rv_param = query.get("resourceVersion", "")
        start, too_old = "", ""
        at: int | None = None
        if query.get("continue"):
            list_rv, start = _decode_continue(query["continue"])
            at, too_old = (
                list_rv,
                "The provided continue parameter is too old to display a consistent list result.",
            )
        elif rv_param not in ("", "0") and query.get("resourceVersionMatch") == "Exact":
            list_rv = int(rv_param)
            at, too_old = list_rv, "The resourceVersion for the provided list is too old."
        else:
            if rv_param not in ("", "0") and int(rv_param) > self.store.rv:
                await asyncio.sleep(_CONSISTENT_READ_WAIT_S * self.time_scale)
                raise errors.status(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {rv_param}, current: {self.store.rv}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                    headers={"Retry-After": "1"},
                )
            list_rv = self.store.rv
        limit = int(query.get("limit") or 0) if rv_param != "0" else 0
        selected = bool(query.get("labelSelector") or query.get("fieldSelector"))
        try:
            page = self.store.page(
                storage,
                route.namespace,
                at,
                after=start,
                limit=limit,
                matches=self._matcher(request),
                counted=not selected,
            )
        except TooOld:
            raise errors.status(410, "Expired", too_old) from None
        metadata: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if page.more:
            metadata["continue"] = _continue_token(list_rv, page.last + "\x00")
            if page.remaining is not None:
                metadata["remainingItemCount"] = page.remaining
        resource = route.resource
        if resource.custom:
            items = [admission.present(resource, o) for o in page.objects]
            metadata = {"continue": metadata.get("continue", ""), **metadata}
        else:
            # Rendered (json) before the next await, so the stored objects need no copy.
            items = [
                {k: v for k, v in admission.present(resource, o).items() if k not in _TYPE}
                for o in page.objects
            ]
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": items,
        }

    # -- watch -------------------------------------------------------------------------------

    async def _watch(self, request: Request) -> web.StreamResponse:
        query = request.query
        matches = self._matcher(request)
        bookmarks = query.get("allowWatchBookmarks", "") in _TRUE
        timeout = (
            float(query["timeoutSeconds"]) * self.time_scale
            if query.get("timeoutSeconds")
            else None
        )
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request.http)
        stream = _WatchStream(self, request, response, matches, bookmarks, timeout)
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            await stream.run()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    # -- writes ------------------------------------------------------------------------------

    def _create(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        route = request.route
        resource = route.resource
        admission.check_decodable(resource, body)
        obj = admission.to_storage(resource, body)
        meta = obj.setdefault("metadata", {})
        if route.namespace is not None:
            if meta.get("namespace", route.namespace) != route.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            meta["namespace"] = route.namespace
            if self.store.get("namespaces", ("", route.namespace)) is None:
                raise errors.not_found(
                    lookup("", "v1", "namespaces"),  # type: ignore[arg-type]
                    route.namespace,
                )
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + admission.random_suffix()
        name = meta.get("name", "")
        if self.store.get(resource.storage_key, _key(route, name)) is not None:
            raise errors.already_exists(resource, name)
        if resource.kind == "Pod":
            prepare_pod_affinity(obj, merges=self.merges_label_keys)
        admission.validate_create(resource, obj, route.namespace)
        node_name = (obj.get("spec") or {}).get("nodeName") if resource.kind == "Pod" else None
        node = self.store.get("nodes", ("", node_name)) if node_name else None
        admission.default_create(resource, obj, node)
        stored = self.commit_new(resource, obj, request.manager)
        return admission.present(resource, stored)

    def commit_new(
        self, resource: Resource, obj: dict[str, Any], manager: str | None
    ) -> dict[str, Any]:
        """Store a new object with server-set metadata (also how seeds enter)."""
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", admission.now_time())
        meta.pop("resourceVersion", None)
        if manager is not None and resource.managed_fields:
            meta["managedFields"] = fieldsets.record_update(
                [],
                manager=manager,
                api_version=resource.api_version,
                subresource=None,
                old={},
                new=obj,
                now=admission.now_time(),
            )
        return self.store.write(resource.storage_key, obj)

    def commit(
        self,
        request: Request,
        old: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str | None,
        track: bool = True,
    ) -> dict[str, Any]:
        """The shared tail of PUT and PATCH: subresource rules, admission, ownership, no-op."""
        resource = request.route.resource
        if resource.status_subresource:
            if subresource == "status":
                status = new.get("status")
                new = copy.deepcopy(old)
                new["status"] = status
            elif "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        for key in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old["metadata"]:
                new["metadata"][key] = old["metadata"][key]
        new["kind"], new["apiVersion"] = old["kind"], old["apiVersion"]
        admission.normalize(resource, new)
        admission.check_custom(resource, new)
        if resource.has_generation and _spec_changed(resource, old, new):
            new["metadata"]["generation"] = old["metadata"].get("generation", 0) + 1
        if _strip_volatile(old) == _strip_volatile(new):
            return old
        if track and resource.managed_fields:
            new["metadata"]["managedFields"] = fieldsets.record_update(
                old["metadata"].get("managedFields", []),
                manager=request.manager,
                api_version=resource.api_version,
                subresource=subresource,
                old=old,
                new=new,
                now=admission.now_time(),
            )
        return self.store.write(resource.storage_key, new)

    def _update(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        route = request.route
        admission.check_decodable(route.resource, body)
        old = self._get(route)
        new = admission.to_storage(route.resource, body)
        meta = new.setdefault("metadata", {})
        if meta.get("name", route.name) != route.name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not "
                f"match the name on the URL ({route.name})"
            )
        self._check_preconditions(route, old, meta)
        meta["managedFields"] = old["metadata"].get("managedFields", [])
        return self._present(route, self.commit(request, old, new, subresource=route.subresource))

    def _check_preconditions(self, route: Route, old: dict[str, Any], meta: dict[str, Any]) -> None:
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise errors.status(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                f"{old['metadata']['uid']}",
                {"name": route.name, "kind": route.resource.plural},
            )
        if (
            meta.get("resourceVersion")
            and meta["resourceVersion"] != old["metadata"]["resourceVersion"]
        ):
            raise errors.conflict(route.resource, route.name or "")

    async def _patch(self, request: Request) -> web.Response:
        route = request.route
        hold = self.holds.get((route.resource.storage_key, _key(route, route.name or "")))
        if hold is not None:
            hold.count += 1
            hold.arrived.set()
            await hold.released.wait()
        content_type = request.http.content_type
        body = await self._body(request.http)
        if (
            content_type == "application/apply-patch+yaml"
            and self.store.get(route.resource.storage_key, _key(route, route.name or "")) is None
        ):
            return self._created(self._apply_new(request, body))
        old = self._get(route)
        warnings: list[str] = []
        if content_type == "application/apply-patch+yaml":
            new = self._apply(request, old, body)
            track = False
        else:
            new = self._patched(route.resource, content_type, old, body)
            track = True
            self._check_preconditions(route, old, new.get("metadata", {}))
            new.setdefault("metadata", {})["managedFields"] = old["metadata"].get(
                "managedFields", []
            )
        if route.resource.custom:
            warnings = admission.prune_unknown(route.resource, new)
        stored = self.commit(request, old, new, subresource=route.subresource, track=track)
        headers = (
            {
                "Warning": ", ".join(
                    f'299 - "{w.replace(chr(34), chr(92) + chr(34))}"' for w in warnings
                )
            }
            if warnings
            else None
        )
        return self._json(self._present(route, stored), headers=headers)

    @staticmethod
    def _patched(
        resource: Resource, content_type: str, old: dict[str, Any], body: Any
    ) -> dict[str, Any]:
        if content_type == "application/strategic-merge-patch+json":
            if resource.custom:
                raise errors.unsupported_media_type(_CUSTOM_PATCH_TYPES)
            result: Any = patches.strategic_merge_patch(old, body)
        elif content_type == "application/merge-patch+json":
            result = patches.merge_patch(old, body)
        elif content_type == "application/json-patch+json":
            if not isinstance(body, list):
                raise errors.bad_request(
                    "error decoding patch: json: cannot unmarshal object "
                    "into Go value of type []handlers.jsonPatchOp"
                )
            try:
                result = patches.json_patch(old, body)
            except (patches.PatchFailed, KeyError, ValueError):
                raise errors.status(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                    {},
                ) from None
        else:
            raise errors.unsupported_media_type(
                _CUSTOM_PATCH_TYPES if resource.custom else _BUILTIN_PATCH_TYPES
            )
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise errors.bad_request("the patch did not produce an object")
        return result

    def _apply(self, request: Request, old: dict[str, Any], body: Any) -> dict[str, Any]:
        manager = request.query.get("fieldManager")
        if not manager:
            raise errors.status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        config = yaml.safe_load(body) if isinstance(body, str) else body
        try:
            new, entries = fieldsets.apply(
                old["metadata"].get("managedFields", []),
                manager=manager,
                api_version=request.route.resource.api_version,
                current=old,
                config=config,
                force=request.query.get("force", "") in _TRUE,
                now=admission.now_time(),
            )
        except fieldsets.ApplyConflict as exc:
            raise _apply_conflict(exc.conflicts) from None
        new["metadata"]["managedFields"] = entries
        return new

    async def _scale(self, request: Request) -> web.Response:
        """GET, PATCH or PUT of a Deployment's or StatefulSet's scale subresource."""
        old = self._get(request.route)
        if request.http.method == "GET":
            return self._json(scale.scale_of(old))
        body = await self._body(request.http)
        new = scale.scaled(old, request.http.content_type, body)
        stored = self.commit(request, old, new, subresource="scale")
        return self._json(scale.scale_of(stored))

    def _apply_new(self, request: Request, body: Any) -> dict[str, Any]:
        """Server-side apply of an object that does not exist yet creates it, as `kubectl
        apply --server-side` relies on (apiserver endpoints/handlers/patch.go: an apply patch
        on NotFound becomes a create), in the namespace it names, which must exist."""
        route = request.route
        resource = route.resource
        empty = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {
                "name": route.name,
                **({"namespace": route.namespace} if route.namespace else {}),
            },
        }
        if (
            route.namespace is not None
            and self.store.get("namespaces", ("", route.namespace)) is None
        ):
            raise errors.not_found(lookup("", "v1", "namespaces"), route.namespace)  # type: ignore[arg-type]
        obj = admission.to_storage(resource, self._apply(request, empty, body))
        admission.validate_create(resource, obj, route.namespace)
        admission.default_create(resource, obj, None)
        # The managedFields are the apply's own entry: commit_new records no update on top.
        return admission.present(resource, self.commit_new(resource, obj, None))

    def _delete(self, request: Request) -> dict[str, Any]:
        route = request.route
        old = self._get(route)
        spec = old.get("spec") or {}
        if route.resource.kind == "Pod" and spec.get("nodeName"):
            return self._present(route, self.terminate_pod(request, old))
        gone = self.store.delete(route.resource.storage_key, _key(route, route.name or ""))
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": route.name,
                **({"group": route.resource.group} if route.resource.group else {}),
                "kind": route.resource.plural,
                "uid": gone["metadata"]["uid"],
            },
        }

    def terminate_pod(self, request: Request, pod: dict[str, Any]) -> dict[str, Any]:
        """Graceful deletion: a bound pod stays Terminating until its kubelet (absent) acts."""
        grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        new = copy.deepcopy(pod)
        deadline = time.time() + grace
        new["metadata"]["deletionTimestamp"] = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline)
        )
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        new["metadata"]["generation"] = pod["metadata"].get("generation", 0) + 1
        return self.store.write(request.route.resource.storage_key, new)


def _apply_conflict(conflicts: list[fieldsets.Conflict]) -> errors.ApiError:
    by_manager: dict[tuple[str, str], list[str]] = {}
    for c in conflicts:
        by_manager.setdefault((c.manager, c.api_version), []).append(c.field)
    count = len(conflicts)
    if count == 1:
        c = conflicts[0]
        message = (
            f'Apply failed with 1 conflict: conflict with "{c.manager}" using '
            f"{c.api_version}: {c.field}"
        )
    else:
        lines = [
            f'conflicts with "{m}" using {v}:\n' + "\n".join(f"- {f}" for f in fs)
            for (m, v), fs in by_manager.items()
        ]
        message = f"Apply failed with {count} conflicts: " + "\n".join(lines)
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{c.manager}" using {c.api_version}',
            "field": c.field,
        }
        for c in conflicts
    ]
    return errors.status(409, "Conflict", message, {"causes": causes})


class _WatchStream:
    """One open watch: initial events or history replay, then live events and bookmarks."""

    def __init__(
        self,
        server: KubeApiServer,
        request: Request,
        response: web.StreamResponse,
        matches: Matcher,
        bookmarks: bool,
        timeout: float | None,
    ) -> None:
        self.server = server
        self.request = request
        self.response = response
        self.matches = matches
        self.bookmarks = bookmarks
        self.deadline = time.monotonic() + timeout if timeout is not None else None

    async def send(self, event_type: str, obj: dict[str, Any]) -> None:
        line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")) + "\n"
        await self.response.write(line.encode())

    async def error(self, body: dict[str, Any]) -> None:
        await self.send("ERROR", body)

    async def run(self) -> None:
        server, query = self.server, self.request.query
        storage = self.request.route.resource.storage_key
        rv = query.get("resourceVersion", "")
        since = 0
        if rv in ("", "0"):
            if not server.watch_progress:
                await self._without_progress_notify(rv)
                if rv == "" or self.bookmarks:
                    return
            initial = [
                o
                for o in server.store.objects(storage, self.request.route.namespace)
                if self.matches(o)
            ]
            backlog, sub = server.store.subscribe(storage, server.store.rv)
            for obj in initial:
                await self.send("ADDED", self._present(obj))
            if self.bookmarks and server.watch_progress:
                await self.send("BOOKMARK", self._bookmark(initial_end=True))
        else:
            since = int(rv)
            try:
                backlog, sub = server.store.subscribe(storage, min(since, server.store.rv))
            except TooOld as exc:
                await self.error(
                    errors.status(
                        410, "Expired", f"too old resource version: {exc.requested} ({exc.oldest})"
                    ).body
                )
                return
        try:
            for change in backlog:
                await self._deliver(change, since)
            await self._live(sub.queue, since)
        finally:
            server.store.unsubscribe(sub)

    async def _without_progress_notify(self, rv: str) -> None:
        """etcd < 3.4.31 cannot confirm freshness: how v1.36 fails, as in 02 (etcd 3.4)."""
        if self.bookmarks:
            await self.error(
                errors.status(
                    500,
                    "InternalError",
                    "a watch stream was requested by the client but the "
                    "required storage feature RequestWatchProgress is disabled",
                ).body
            )
        elif rv == "":
            await asyncio.sleep(self._remaining(_CONSISTENT_READ_WAIT_S * self.server.time_scale))
            current = self.server.store.rv
            await self.error(
                errors.status(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {current + 1}, current: {current}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                ).body
            )

    def _remaining(self, cap: float) -> float:
        if self.deadline is None:
            return cap
        return max(0.0, min(cap, self.deadline - time.monotonic()))

    def _next_bookmark(self) -> float | None:
        """Like the cacher: every minute, and 2 s before the deadline if that comes first."""
        if not self.bookmarks:
            return None
        now = time.monotonic()
        at = now + _BOOKMARK_EVERY_S * self.server.time_scale
        if self.deadline is not None:
            at = min(at, self.deadline - 2 * self.server.time_scale)
        return at if at > now else None

    async def _live(self, queue: asyncio.Queue[Change], since: int) -> None:
        closing = self.server.closing
        bookmark_at = self._next_bookmark()
        while not closing.is_set():
            wake = min((t for t in (self.deadline, bookmark_at) if t is not None), default=None)
            wait = None if wake is None else max(0.0, wake - time.monotonic())
            getter = asyncio.ensure_future(queue.get())
            closer = asyncio.ensure_future(closing.wait())
            done, _ = await asyncio.wait(
                {getter, closer}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            for task in (getter, closer):
                if task not in done:
                    task.cancel()
            if getter in done:
                hold = self.server.watch_holds.get(self.request.route.resource.storage_key)
                if hold is not None:  # changes queue up meanwhile, then go out back to back
                    hold.count += 1
                    hold.arrived.set()
                    await hold.released.wait()
                await self._deliver(getter.result(), since)
                continue
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                return
            if bookmark_at is not None and now >= bookmark_at:
                await self.send("BOOKMARK", self._bookmark(initial_end=False))
                bookmark_at = self._next_bookmark()

    async def _deliver(self, change: Change, since: int) -> None:
        if change.rv <= since:
            return
        new_match = change.type != "DELETED" and self.matches(change.obj)
        old_match = change.prev is not None and self.matches(change.prev)
        if new_match:
            await self.send("MODIFIED" if old_match else "ADDED", self._present(change.obj))
        elif old_match:
            await self.send("DELETED", self._present(change.obj))

    def _present(self, obj: dict[str, Any]) -> dict[str, Any]:
        return admission.present(self.request.route.resource, obj)

    def _bookmark(self, *, initial_end: bool) -> dict[str, Any]:
        """A skeleton of the kind carrying only the resourceVersion (plus Go zero values)."""
        resource = self.request.route.resource
        meta: dict[str, Any] = {"resourceVersion": str(self.server.store.rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj: dict[str, Any] = {
            "kind": resource.kind,
            "apiVersion": resource.api_version,
            "metadata": meta,
        }
        if resource.kind == "Node":
            obj["spec"] = {}
            obj["status"] = copy.deepcopy(admission.NODE_STATUS_ZERO)
        elif resource.kind == "Pod":
            obj["spec"] = {"containers": None}
            obj["status"] = {}
        return obj
