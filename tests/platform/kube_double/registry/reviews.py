"""SelfSubjectReview and SelfSubjectAccessReview: who the caller is and what it may do
(`kubectl auth whoami`, `kubectl auth can-i`)."""

from __future__ import annotations

from typing import Any

from .. import admission, fieldsets
from ..auth import allowed
from ..request import Request


def review(request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """SelfSubjectReview and SelfSubjectAccessReview for the calling user."""
    user = request.user
    route = request.route
    if route.resource.plural == "selfsubjectreviews":
        info: dict[str, Any] = {"username": user.name}
        if user.uid:
            info["uid"] = user.uid
        info["groups"] = list(user.groups)
        if user.extra:
            info["extra"] = user.extra
        return {
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": admission.now_time()},
            "status": {"userInfo": info},
        }
    attributes = (body.get("spec") or {}).get("resourceAttributes") or {}
    api_version = "authorization.k8s.io/v1"
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": api_version,
        "metadata": {
            "managedFields": fieldsets.record_update(
                [],
                manager=request.manager,
                api_version=api_version,
                subresource=None,
                old={},
                new={"spec": body.get("spec") or {}},
                now=admission.now_time(),
            )
        },
        "spec": body.get("spec") or {},
        "status": {
            "allowed": allowed(user, attributes.get("verb", ""), attributes.get("resource", ""))
        },
    }
