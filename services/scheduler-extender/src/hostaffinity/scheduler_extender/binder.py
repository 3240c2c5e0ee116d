"""Creates `pods/binding`, the one write the extender makes, as kube-scheduler's binder would.

Through the runtime's raw-JSON client (kubernetes_asyncio with `_preload_content=False`): the
generated `create_namespaced_pod_binding` raises ValueError after a successful 201 because it
reads the returned Status as a V1Binding (tests/fixtures/kube-apiserver/09-pod-binding.json).
"""

from __future__ import annotations

import asyncio
import json

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.kube.client import TRANSPORT_ERRORS, KubeClient, ResourceRef


class BindError(Exception):
    """The API server refused the binding, or did not answer in time; the text says why."""


def _status_message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or b"{}")
    except ValueError:
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or error.reason or "no message")


class Binder:
    """Binds pods to nodes; the pod's uid is a precondition, as in kube-scheduler's binding."""

    def __init__(self, client: KubeClient, timeout_seconds: float) -> None:
        self._client = client
        self._timeout = timeout_seconds

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Raises BindError when the pod is not bound to `node` afterwards."""
        metadata = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = ResourceRef("", "v1", "pods", namespace).path(name) + "/binding"
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.request("POST", path, body=body)
        except ApiException as error:
            raise BindError(
                f"binding {namespace}/{name} to {node} failed: HTTP {error.status}: "
                f"{_status_message(error)}"
            ) from error
        except TRANSPORT_ERRORS as error:
            raise BindError(
                f"binding {namespace}/{name} to {node}: API server unreachable or silent for "
                f"{self._timeout:g}s ({error!r})"
            ) from error
