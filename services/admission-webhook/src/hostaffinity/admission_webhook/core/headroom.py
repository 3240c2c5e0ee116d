"""Admission warnings for rollouts that would deadlock: replicas >= usable ESXi hosts.

A required anti-affinity term on the host lets one selected pod run per host. When the pods it
selects, the new one included, fill every host the pod may use, the next replica -- a rolling
update's surge pod -- has nowhere to go (hostaffinity.affinity.headroom says it in words). The
webhook cannot stop that, and must not refuse the pod; it returns the sentence as an admission
warning, which kubectl prints to whoever applied the workload.

It judges with the engine over what it watches: the pods (the informer the twinless-pod
reporter already runs, each pod decoded whole now) and the nodes (labels, cordons, taints).
The pod under review is judged as the physical reading reads it, which gives exactly the terms
the patch adds (tests/test_admission_engine.py proves the two agree), with its matchLabelKeys
merged as the API server will merge them. Namespace labels are not watched: a term's
namespaceSelector is read as kube-scheduler reads `{}` (every namespace), which can only warn
more, never less.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from hostaffinity.admission_webhook.core.mutation import MutationSettings, opted_in
from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.headroom import host_headroom
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import apply_label_keys
from hostaffinity.affinity.model import Pod

_log = logging.getLogger(__name__)
WARNING_PREFIX = "hostaffinity: no ESXi host to spare: "


class HostHeadroomAdvisor:
    """Keeps an index of pods and nodes and warns about a pod whose host terms leave no room."""

    def __init__(self, settings: MutationSettings) -> None:
        self._settings = settings
        index = ClusterIndex(physical_anti_affinity=settings.physical_anti_affinity)
        self._engine = AffinityEngine(index)

    @property
    def index(self) -> ClusterIndex:
        """The pods and nodes it judges by: the service's informers keep them."""
        return self._engine.index

    def warnings(self, pod: Mapping[str, Any]) -> list[str]:
        """The sentences for a pod being created; none for a pod that does not opt in."""
        metadata = pod.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        if not opted_in(annotations if isinstance(annotations, Mapping) else {}, self._settings):
            return []
        try:
            decoded = apply_label_keys(msgspec.convert(pod, Pod))
        except msgspec.ValidationError as error:  # the planner already warned about its shape
            _log.debug("no headroom check for an unreadable pod: %s", error)
            return []
        return [WARNING_PREFIX + tight.sentence() for tight in host_headroom(self._engine, decoded)]
