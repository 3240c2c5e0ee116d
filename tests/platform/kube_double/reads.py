"""The read verbs: LIST (selectors, paging with continue tokens, exact and too-large
resourceVersions) and GET, each as a Table when kubectl asks for one (tables.py)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from typing import Any

from . import admission, errors, tables
from .registry import PRINTERS
from .request import Request, object_key
from .resources import Route
from .selectors import Matcher, field_matcher, label_matcher
from .store import Store, TooOld

_TYPE = ("kind", "apiVersion")  # a built-in LIST's items carry neither
CONSISTENT_READ_WAIT_S = 3.0  # how long a read waits for a revision ahead of the store


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


def matcher(request: Request) -> Matcher:
    """The request's label and field selectors as one predicate over stored objects."""
    labels = label_matcher(request.query.get("labelSelector"))
    fields = field_matcher(request.query.get("fieldSelector"), request.route.resource.field_labels)
    return lambda obj: labels(obj) and fields(obj)


def stored_object(store: Store, route: Route) -> dict[str, Any]:
    """The object the route names, or the server's 404."""
    obj = store.get(route.resource.storage_key, object_key(route, route.name or ""))
    if obj is None:
        raise errors.not_found(route.resource, route.name or "")
    return obj


def as_table(request: Request, answer: dict[str, Any]) -> dict[str, Any]:
    """A list or an object, or its Table when the client asks for one and the resource has
    printer columns (registry/)."""
    printer = PRINTERS.get(request.route.resource.storage_key)
    if printer is None or not tables.wants_table(request.http.headers.get("Accept", "")):
        return answer
    if "items" in answer:
        return tables.table(printer, answer["items"], answer["metadata"])
    meta = {"resourceVersion": answer["metadata"].get("resourceVersion", "")}
    return tables.table(printer, [answer], meta)


class Reads:
    """LIST and GET over the store (a part of KubeApiServer)."""

    store: Store
    time_scale: float

    def _get(self, request: Request) -> dict[str, Any]:
        route = request.route
        return as_table(
            request, admission.present(route.resource, stored_object(self.store, route))
        )

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
                await asyncio.sleep(CONSISTENT_READ_WAIT_S * self.time_scale)
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
                matches=matcher(request),
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
