"""Bearer-token authentication and a two-level RBAC: admins may do anything, others nothing
but ask who they are (what `system:basic-user` grants), as in the recorded 401/403 bodies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import errors
from .resources import Route

_SELF_REVIEWS = frozenset({"selfsubjectreviews", "selfsubjectaccessreviews"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]
    admin: bool = False
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))


def authenticate(header: str | None, tokens: dict[str, User]) -> User:
    """No credentials is `system:anonymous` (anonymous auth is on); a bad token is 401."""
    if header is None:
        return ANONYMOUS
    scheme, _, token = header.partition(" ")
    user = tokens.get(token) if scheme.lower() == "bearer" else None
    if user is None:
        raise errors.status(401, "Unauthorized", "Unauthorized")
    return user


def verb_of(method: str, route: Route | None, watch: bool) -> str:
    if method == "GET":
        if watch:
            return "watch"
        return "get" if route is not None and route.name else "list"
    return _VERBS.get(method, method.lower())


def allowed(user: User, verb: str, plural: str) -> bool:
    return user.admin or (verb == "create" and plural in _SELF_REVIEWS)


def forbidden(user: User, verb: str, route: Route) -> errors.ApiError:
    """The RBAC 403 body, worded as the authorizer words it."""
    resource = route.resource
    plural = resource.plural + (f"/{route.subresource}" if route.subresource else "")
    who = f'{resource.group_resource} "{route.name}"' if route.name else resource.group_resource
    where = f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
    details: dict[str, Any] = {}
    if route.name:
        details["name"] = route.name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return errors.status(
        403,
        "Forbidden",
        f'{who} is forbidden: User "{user.name}" cannot {verb} resource "{plural}" in API group '
        f'"{resource.group}" {where}',
        details,
    )
