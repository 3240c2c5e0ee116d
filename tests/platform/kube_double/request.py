"""One request as the verbs see it, and the HTTP plumbing they share: the body read (JSON,
YAML apply patches, protobuf), the JSON answer, the field manager, an object's store key."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import errors, protobuf
from .auth import User
from .resources import Route
from .store import Key

TRUE = frozenset({"1", "t", "T", "true", "True", "TRUE"})


@dataclass
class Request:
    """What the verbs need from one HTTP request."""

    route: Route
    query: dict[str, str]
    manager: str
    user: User
    http: web.Request


def manager_of(request: web.Request, query: dict[str, str]) -> str:
    """Update managers default to the User-Agent's product token (`OpenAPI-Generator/...`)."""
    if query.get("fieldManager"):
        return query["fieldManager"]
    return request.headers.get("User-Agent", "unknown").split("/")[0].split(" ")[0]


def object_key(route: Route, name: str) -> Key:
    return (route.namespace or "", name)


async def read_body(http: web.Request) -> Any:
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


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    # Exactly `application/json`, without aiohttp's `; charset=utf-8`, as the server sends.
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
