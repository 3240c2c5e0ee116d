"""RemovePodsViolatingInterPodAffinity: required pod affinity that no longer holds.

A pod whose required pod affinity was met when it was scheduled loses its partner (deleted,
moved, relabelled). The engine decides, exactly as kube-scheduler's InterPodAffinity filter
would for the pod on its own node today (interpodaffinity/filtering.go satisfyPodAffinity).
"""

from __future__ import annotations

from typing import ClassVar

from hostaffinity.affinity.explain import INTER_POD_AFFINITY, REASON_AFFINITY
from hostaffinity.descheduler.state import ClusterState
from hostaffinity.descheduler.strategies.base import PodScope, ScopedArgs, Violation
from hostaffinity.descheduler.strategies.changes import SCOPE_CHANGES, Change


class InterPodAffinityArgs(ScopedArgs, frozen=True):
    pass


class InterPodAffinity:
    name: ClassVar[str] = "RemovePodsViolatingInterPodAffinity"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.POD_AFFINITY | Change.NODE_LABELS

    def __init__(self, args: InterPodAffinityArgs) -> None:
        self.args = args
        self._scope = PodScope(args)

    def violations(self, state: ClusterState) -> list[Violation]:
        found = []
        for record in list(state.index.pods()):
            if not record.terms.required_affinity:
                continue
            pod = state.pods[record.key]
            if not self._scope.covers(pod):
                continue
            result = state.engine.filter(pod, [record.node])
            why = result.rejected.get(record.node)
            if why is None or why.plugin != INTER_POD_AFFINITY or why.reason != REASON_AFFINITY:
                continue
            found.append(
                Violation(
                    self.name,
                    f"required pod affinity of {record.key}: {why.message}",
                    (record.key,),
                )
            )
        return found
