"""RemovePodsViolatingInterPodAffinity: required pod affinity that no longer holds.

A pod whose required pod affinity was met when it was scheduled loses its partner (deleted,
moved, relabelled). The engine decides, exactly as kube-scheduler's InterPodAffinity filter
would for the pod on its own node today (interpodaffinity/filtering.go satisfyPodAffinity).
"""

from __future__ import annotations

from typing import ClassVar

from hostaffinity.affinity.explain import INTER_POD_AFFINITY, REASON_AFFINITY
from hostaffinity.affinity.index import PodRecord
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import PodScope, ScopedArgs, Violation
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.scope import Scope, departed_labels, touched_pods


class InterPodAffinityArgs(ScopedArgs, frozen=True):
    pass


class InterPodAffinity:
    name: ClassVar[str] = "RemovePodsViolatingInterPodAffinity"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.POD_AFFINITY | Change.NODE_LABELS

    def __init__(self, args: InterPodAffinityArgs) -> None:
        self.args = args
        self._scope = PodScope(args)

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        found = []
        holders = state.index.pods() if scope is None else _holders_touched(state, scope)
        for record in list(holders):
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


def _holders_touched(state: ClusterState, scope: Scope) -> list[PodRecord]:
    """The pods whose required pod affinity the scope's changes can break: the changed pods
    themselves, and the holders whose terms select a changed pod, as it is now (it may have
    moved out of their domain) or as it was (it may have been relabelled or deleted). A
    namespaceSelector is read with the namespace's labels and, as interpod.incoming_scope
    reads one, with none: the "" namespace has none."""
    index = state.index
    changed = touched_pods(state, scope)
    selected = [(record.namespace, record.labels) for record in changed]
    selected.extend(departed_labels(scope))
    holders = {record.key: record for record in changed}
    for namespace, labels in selected:
        for name in (namespace, ""):
            for holder, _term in index.terms_matching("required_affinity", name, labels):
                holders.setdefault(holder.key, holder)
    return list(holders.values())
