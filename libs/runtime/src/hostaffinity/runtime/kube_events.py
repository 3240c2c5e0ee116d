"""Kubernetes Events about the objects a service acts on: how bad input reaches an operator.

Repeats of the same (object, reason, message) bump `count` on the existing Event instead of
creating new ones, as client-go's recorder does. Recording never raises: an Event that cannot
be written is logged and dropped, so reporting a problem never becomes a second problem.
"""

import logging
import time
from dataclasses import dataclass
from typing import Literal

from hostaffinity.runtime.kube import KubeClient, ResourceRef
from hostaffinity.schema import utc_timestamp

log = logging.getLogger(__name__)

# A core/v1 Event about a cluster-scoped object must live in "default" (the API server answers
# 422 otherwise; see shared/fixtures/kube-apiserver/06-create-events.json, E5).
CLUSTER_SCOPED_EVENT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    name: str
    uid: str = ""
    namespace: str = ""
    api_version: str = "v1"


@dataclass(slots=True)
class _Recorded:
    name: str
    namespace: str
    count: int


class EventRecorder:
    """Writes core/v1 Events for one component (e.g. `hostaffinity-node-labeller`)."""

    def __init__(self, client: KubeClient, component: str, instance: str) -> None:
        self._client = client
        self._component = component
        self._instance = instance
        self._recorded: dict[tuple[ObjectRef, str, str], _Recorded] = {}

    async def record(
        self,
        about: ObjectRef,
        reason: str,
        message: str,
        kind: Literal["Normal", "Warning"] = "Warning",
    ) -> None:
        """Create the Event, or count a repeat on the one already written."""
        key = (about, reason, message)
        now = utc_timestamp()
        try:
            previous = self._recorded.get(key)
            if previous is not None:
                previous.count += 1
                await self._client.request(
                    "PATCH",
                    _events(previous.namespace).path(previous.name),
                    body={"count": previous.count, "lastTimestamp": now},
                    content_type="application/merge-patch+json",
                )
                return
            namespace = about.namespace or CLUSTER_SCOPED_EVENT_NAMESPACE
            name = f"{about.name}.{time.time_ns():x}"
            body = self._body(about, name, namespace, reason, message, kind, now)
            await self._client.request("POST", _events(namespace).path(), body=body)
            self._recorded[key] = _Recorded(name=name, namespace=namespace, count=1)
        except Exception:  # an Event is best effort; never fail the caller
            log.exception("could not record event %s on %s %s", reason, about.kind, about.name)

    def _body(
        self,
        about: ObjectRef,
        name: str,
        namespace: str,
        reason: str,
        message: str,
        kind: str,
        now: str,
    ) -> dict[str, object]:
        involved: dict[str, str] = {
            "apiVersion": about.api_version,
            "kind": about.kind,
            "name": about.name,
        }
        if about.uid:
            involved["uid"] = about.uid
        if about.namespace:
            involved["namespace"] = about.namespace
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
        }


def _events(namespace: str) -> ResourceRef:
    return ResourceRef("", "v1", "events", namespace)
