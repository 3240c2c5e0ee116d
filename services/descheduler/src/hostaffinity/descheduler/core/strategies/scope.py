"""What a scoped cycle judges: the nodes and pods changed since the last cycle.

A cycle started only by changes (a vMotion, a relabelled or re-tainted node, pods assigned or
relabelled) need not judge every pod: a violation that was not there before must involve one of
them. Each strategy is handed the scope (None: judge everything) and restricts itself to the pods
those changes can put in violation, or judges everything where it cannot tell.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from hostaffinity.affinity.index import PodRecord
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState

# Beyond this share of the nodes (or of the pods) a full cycle costs about as much: judge all;
# in a small cluster, beyond these counts.
FULL_CYCLE_SHARE: Final = 0.03
SCOPED_NODES_AT_LEAST: Final = 10
SCOPED_PODS_AT_LEAST: Final = 300


@dataclass
class Scope:
    """The changes since the last cycle a strategy must judge."""

    # Nodes whose domains, labels or taints changed (a vMotion, a relabel, a re-taint), became
    # Ready or schedulable: the pods on them are judged.
    nodes: set[str] = field(default_factory=set)
    # Pods placed anew (assigned, relabelled, their rules changed), and pods a previous cycle
    # left in violation (no place to go, a limit, a refused eviction): judged themselves.
    pods: set[str] = field(default_factory=set)
    # The earlier objects of pods changed or deleted: whoever relied on them (a pod affinity
    # partner) is judged.
    departed: list[DeschedulerPod] = field(default_factory=list)

    def absorb(self, other: Scope) -> None:
        self.nodes |= other.nodes
        self.pods |= other.pods
        self.departed.extend(other.departed)

    def size(self) -> int:
        return len(self.nodes) + len(self.pods) + len(self.departed)

    def describe(self) -> str:
        return f"{len(self.nodes)} nodes, {len(self.pods)} pods, {len(self.departed)} departed"


def narrowed(scope: Scope | None, state: ClusterState) -> Scope | None:
    """The scope, or None (a full cycle) when it is as large as a few percent of the cluster."""
    if scope is None:
        return None
    if len(scope.nodes) > max(SCOPED_NODES_AT_LEAST, FULL_CYCLE_SHARE * len(state.nodes)):
        return None
    pods = len(scope.pods) + len(scope.departed)
    if pods > max(SCOPED_PODS_AT_LEAST, FULL_CYCLE_SHARE * len(state.pods)):
        return None
    return scope


def touched_pods(state: ClusterState, scope: Scope) -> list[PodRecord]:
    """The indexed pods the scope names: those on its nodes and its own pods, once each."""
    index = state.index
    keys: dict[str, None] = {}
    for node in sorted(scope.nodes):
        keys.update((record.key, None) for record in index.pods_on(node))
    keys.update((key, None) for key in sorted(scope.pods))
    return [record for key in keys if (record := index.pod(key)) is not None]


def departed_labels(scope: Scope) -> Iterable[tuple[str, dict[str, str]]]:
    """(namespace, labels) of the pods' earlier objects."""
    return ((pod.metadata.namespace, pod.metadata.labels) for pod in scope.departed)
