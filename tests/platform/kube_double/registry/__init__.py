"""What differs by resource, one module per resource as kube-apiserver keeps it
(pkg/registry/<group>/<resource>/): the generic verbs (`reads`, `watch`, `writes`, routed by
`server`) ask here for a resource's own behaviour -- its printer columns, its bookmark's
skeleton, the subresources that are actions (a pod's binding and eviction, a service account's
token, the self-subject reviews) and the scale subresource."""

from __future__ import annotations

import copy
from typing import Any

from .. import admission
from ..auth import User
from ..request import Request
from ..store import Store
from ..tables import Printer
from . import nodes, pods, reviews, serviceaccounts

# Printer columns by storage key: `kubectl get` shows these; other resources are listed plainly.
PRINTERS: dict[str, Printer] = {"nodes": nodes.PRINTER}


def bookmark_skeleton(storage_key: str) -> dict[str, Any]:
    """A BOOKMARK's object besides its kind and metadata: the Go zero values the server's
    encoder writes for the kind (a Node's status, a Pod's `containers: null`)."""
    if storage_key == "nodes":
        return {"spec": {}, "status": copy.deepcopy(admission.NODE_STATUS_ZERO)}
    if storage_key == "pods":
        return {"spec": {"containers": None}, "status": {}}
    return {}


def create_subresource(
    store: Store, tokens: dict[str, User], request: Request, body: dict[str, Any]
) -> dict[str, Any]:
    """POST to a subresource that is an action: binding, eviction, token, or a review."""
    plural, sub = request.route.resource.plural, request.route.subresource
    if plural in ("selfsubjectreviews", "selfsubjectaccessreviews"):
        return reviews.review(request, body)
    if sub == "binding":
        return pods.bind(store, request, body)
    if sub == "eviction":
        return pods.evict(store, request, body)
    return serviceaccounts.token(store, tokens, request, body)
