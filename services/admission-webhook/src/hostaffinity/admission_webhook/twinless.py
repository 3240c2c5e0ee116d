"""Fail-open made visible: opted-in pods that were admitted without their host-key terms.

With `failurePolicy: Ignore` the API server creates a pod unpatched when the webhook is down,
slow or not yet trusted, and says nothing. This reporter watches pods and asks the planner what
the webhook would still add to each: an opted-in pod for which the answer is not "nothing" was
admitted without the webhook. It is counted (the `hostaffinity_webhook_pods_without_twin` gauge)
and gets one Warning Event; the descheduler moves such pods once their placement breaks the
physical intent (README "pods created before the webhook").

Why a light pod informer of its own rather than a hook in the extender's pod feed: the feed and
its cache are being reworked on another branch, and this keeps the two apart; the informer keeps
only a small record per pod, and only opted-in pods are decoded whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec

from hostaffinity.admission_webhook.core.mutation import MutationSettings, opted_in, plan_pod
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.runtime.kube.informer import InformerEvent
from hostaffinity.schema import POD_SPREAD_ACROSS_HOSTS

_log = logging.getLogger(__name__)
REASON: Final = "AdmittedWithoutHostTerms"


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    annotations: dict[str, str] = msgspec.field(default_factory=dict)


class _Head(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_head = msgspec.json.Decoder(_Head)


@dataclass(frozen=True, slots=True)
class PodAdmission:
    """What the reporter keeps per pod: who it is and what the webhook would still add."""

    namespace: str
    name: str
    uid: str
    missing: str = ""


def _missing(raw: bytes, settings: MutationSettings) -> str:
    mutation = plan_pod(json.loads(raw), settings)
    if mutation.warnings or not mutation.operations:
        return ""
    parts = []
    if mutation.twins:
        parts.append(f"{mutation.twins} host-key twin(s) of its hostname anti-affinity")
    if mutation.host_label_required:
        parts.append("the host label requirement")
    if mutation.spreads_moved:
        parts.append(f"the host-key reading of {mutation.spreads_moved} hostname spread(s)")
    if mutation.spread_added:
        parts.append("its spread over hosts")
    return ", ".join(parts)


def pod_admission_decoder(settings: MutationSettings) -> Callable[[bytes], PodAdmission]:
    """Decode a pod from the watch: only the head, unless it opted in."""

    def decode(raw: bytes) -> PodAdmission:
        meta = _head.decode(raw).metadata
        admission = PodAdmission(meta.namespace, meta.name, meta.uid)
        if opted_in(meta.annotations, settings) or POD_SPREAD_ACROSS_HOSTS in meta.annotations:
            return PodAdmission(meta.namespace, meta.name, meta.uid, _missing(raw, settings))
        return admission

    return decode


class TwinlessPods:
    """Keeps the set of opted-in pods that lack what the webhook gives, and reports each once."""

    def __init__(self, events: EventRecorder) -> None:
        self._events = events
        self._reported: set[str] = set()

    def count(self) -> int:
        return len(self._reported)

    async def handle(self, event: InformerEvent[PodAdmission]) -> None:
        pod = event.obj
        if event.type == "DELETED" or not pod.missing:
            self._reported.discard(event.key)
            return
        if event.key in self._reported:
            return
        self._reported.add(event.key)
        _log.warning("pod %s was admitted without %s", event.key, pod.missing)
        await self._events.record(
            ObjectRef("Pod", pod.name, pod.uid, pod.namespace),
            REASON,
            f"Created without {pod.missing} (the admission webhook was not reached); "
            "kube-scheduler does not know this pod's physical anti-affinity.",
        )
