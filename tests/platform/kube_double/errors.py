"""Status bodies the double answers with, shaped like the real apiserver's `metav1.Status`."""

from __future__ import annotations

from typing import Any

from .resources import Resource


class ApiError(Exception):
    """An HTTP failure carrying the exact Status body the real server would send."""

    def __init__(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body
        self.headers = headers or {}


def status(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> ApiError:
    """Build a Failure Status; `details` is left out when None, as the server omits it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return ApiError(code, body, headers)


def success(code: int) -> dict[str, Any]:
    """The Success Status that binding and eviction answer with."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def _details(resource: Resource, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return details


def not_found(resource: Resource, name: str) -> ApiError:
    return status(
        404, "NotFound", f'{resource.group_resource} "{name}" not found', _details(resource, name)
    )


def already_exists(resource: Resource, name: str) -> ApiError:
    return status(
        409,
        "AlreadyExists",
        f'{resource.group_resource} "{name}" already exists',
        _details(resource, name),
    )


def conflict(resource: Resource, name: str) -> ApiError:
    return status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.group_resource} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        _details(resource, name),
    )


def bad_request(message: str) -> ApiError:
    return status(400, "BadRequest", message)


def invalid(kind: str, name: str, causes: list[dict[str, str]], *, group: str = "") -> ApiError:
    """422 Invalid with one cause per field error, message built like apimachinery's."""
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    qualified = f"{kind}.{group}" if group else kind
    return status(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', details)


def unsupported_media_type(accepted: str) -> ApiError:
    return status(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + accepted,
    )


def resource_not_found() -> ApiError:
    return status(404, "NotFound", "the server could not find the requested resource", {})
