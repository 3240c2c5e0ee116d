"""What differs by resource, one module per resource as kube-apiserver keeps it
(pkg/registry/<group>/<resource>/): the generic verbs (`reads`, `watch`, `writes`, routed by
`server`) ask here for a resource's own behaviour -- its defaults on create, its printer
columns, its bookmark's skeleton, the subresources that are actions (a pod's binding and
eviction, a service account's token, the self-subject reviews) and the scale subresource."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import admission
from ..auth import User
from ..request import Request
from ..resources import Resource
from ..store import Store
from ..tables import Printer
from . import namespaces, nodes, poddisruptionbudgets, pods, reviews, secrets, serviceaccounts

# Printer columns by storage key: `kubectl get` shows these; other resources are listed plainly.
PRINTERS: dict[str, Printer] = {"nodes": nodes.PRINTER}

# Defaulting on create by kind: the object, and the Node a pod is bound to at creation (if any).
_DEFAULTS: dict[str, Callable[[dict[str, Any], dict[str, Any] | None], None]] = {
    "Pod": pods.default,
    "Node": nodes.default,
    "Namespace": namespaces.default,
    "Secret": secrets.default,
    "PodDisruptionBudget": poddisruptionbudgets.default,
}


def default_create(resource: Resource, obj: dict[str, Any], node: dict[str, Any] | None) -> None:
    """Defaulting and admission on create (`node` is the pod's spec.nodeName Node, if any):
    generation 1 where the resource keeps one, the kind's own defaults, the write invariants."""
    if resource.has_generation:
        obj["metadata"]["generation"] = 1
    if (default := _DEFAULTS.get(resource.kind)) is not None:
        default(obj, node)
    admission.normalize(resource, obj)


def bookmark_skeleton(storage_key: str) -> dict[str, Any]:
    """A BOOKMARK's object besides its kind and metadata: the Go zero values the server's
    encoder writes for the kind (a Node's status, a Pod's `containers: null`)."""
    if storage_key == "nodes":
        return {"spec": {}, "status": copy.deepcopy(nodes.NODE_STATUS_ZERO)}
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
