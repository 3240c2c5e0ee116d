"""The `scale` subresource of Deployments and StatefulSets (`kubectl scale`): an
autoscaling/v1 Scale read from and written to the object's `spec.replicas` (k8s.io/kubernetes
pkg/registry/apps/deployment/storage/storage.go, ScaleREST: Get and Update; the selector
as a label selector string, the status replicas the controller's, none here).
"""

from __future__ import annotations

import copy
from typing import Any

from .. import patches


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The Scale the server answers for `obj`."""
    meta = obj["metadata"]
    selector = obj.get("spec", {}).get("selector", {}).get("matchLabels", {})
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": obj.get("spec", {}).get("replicas", 1)},
        "status": {
            "replicas": obj.get("status", {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        },
    }


def scaled(obj: dict[str, Any], content_type: str, body: Any) -> dict[str, Any]:
    """`obj` with the replicas of the Scale a PATCH (merge or strategic: the same on a Scale)
    or PUT body makes."""
    scale = scale_of(obj)
    if content_type == "application/json-patch+json":
        changed = patches.json_patch(scale, body)
    elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        changed = patches.merge_patch(scale, body)
    else:  # PUT: the Scale itself
        changed = body
    new = copy.deepcopy(obj)
    new.setdefault("spec", {})["replicas"] = changed["spec"]["replicas"]
    return new
