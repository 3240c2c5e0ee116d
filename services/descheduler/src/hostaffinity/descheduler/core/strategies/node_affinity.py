"""RemovePodsViolatingNodeAffinity: pods on a node their node affinity no longer selects.

Upstream (pkg/framework/plugins/removepodsviolatingnodeaffinity/node_affinity.go) takes
`nodeAffinityType`: requiredDuringSchedulingIgnoredDuringExecution evicts a pod whose
nodeSelector / required node affinity does not match its node; the preferred type evicts a pod
when another node it fits scores higher on its preferred terms. Here "higher" means by at least
`minPreferredGain` weight, so a pod is moved only when a clearly better node exists.
"""

from __future__ import annotations

from typing import ClassVar, Final

import msgspec

from hostaffinity.affinity.index import PodRecord
from hostaffinity.affinity.nodeaffinity import preferred_node_terms, required_node_affinity
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
)
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.scope import Scope, touched_pods

REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"


class NodeAffinityArgs(ScopedArgs, frozen=True):
    node_affinity_type: list[str] = msgspec.field(default_factory=lambda: [REQUIRED])
    # Ours: how much more preferred weight a node must offer before a pod is moved for it.
    min_preferred_gain: int = 1

    def validate(self) -> list[str]:
        errors = super().validate()
        if not self.node_affinity_type:
            errors.append("nodeAffinityType needs at least one type")
        for kind in self.node_affinity_type:
            if kind not in (REQUIRED, PREFERRED):
                errors.append(f"nodeAffinityType {kind!r} is not one of {REQUIRED}, {PREFERRED}")
        if self.min_preferred_gain < 1:
            errors.append("minPreferredGain must be at least 1")
        return errors


class NodeAffinity:
    name: ClassVar[str] = "RemovePodsViolatingNodeAffinity"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.POD_AFFINITY | Change.NODE_LABELS

    def __init__(self, args: NodeAffinityArgs) -> None:
        self.args = args
        self._scope = PodScope(args)

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        found: list[Violation] = []
        required = REQUIRED in self.args.node_affinity_type
        preferred = PREFERRED in self.args.node_affinity_type
        # A pod's verdict reads only the pod and its own node's labels.
        pods = state.pods if scope is None else _pods(state, touched_pods(state, scope))
        for key, pod in pods.items():
            spec = pod.spec
            has_node_affinity = spec.affinity is not None and spec.affinity.node_affinity
            if spec.node_selector is None and not has_node_affinity:
                continue
            if not self._scope.covers(pod):
                continue
            node = state.nodes.get(spec.node_name)
            if node is None:
                continue
            labels = node.metadata.labels
            rule = required_node_affinity(pod)
            if required and not rule.is_empty and not rule.matches(spec.node_name, labels):
                text = f"{rule.describe()} does not match node {spec.node_name}"
                found.append(Violation(self.name, text, (key,)))
            elif preferred:
                violation = self._preferred(state, key)
                if violation is not None:
                    found.append(violation)
        return found

    def _preferred(self, state: ClusterState, key: str) -> Violation | None:
        pod = state.pods[key]
        terms = preferred_node_terms(pod)
        if not terms:
            return None

        def weight(node: str) -> int:
            record = state.nodes.get(node)
            if record is None:
                return 0
            labels = record.metadata.labels
            return sum(w for w, term in terms if term.matches(node, labels))

        current = weight(pod.spec.node_name)
        best = max(sum(w for w, _ in terms), 0)
        if best - current < self.args.min_preferred_gain:
            return None
        gain = self.args.min_preferred_gain

        def improves(pod_key: str, node: str) -> bool:
            return weight(node) - current >= gain

        check: TargetCheck = improves
        text = f"preferred node affinity of {key} scores {current} on node {pod.spec.node_name}"
        return Violation(self.name, text, (key,), improves=check)


def _pods(state: ClusterState, records: list[PodRecord]) -> dict[str, DeschedulerPod]:
    return {record.key: state.pods[record.key] for record in records}
