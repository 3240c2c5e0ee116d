"""RemovePodsViolatingNodeTaints: pods on a node with a NoSchedule taint they do not tolerate.

Upstream (pkg/framework/plugins/removepodsviolatingnodetaints/node_taint.go): NoSchedule taints,
PreferNoSchedule too with `includePreferNoSchedule`, `excludedTaints` / `includedTaints` as
`key` or `key=value`. Toleration matching is the engine's (affinity/taints.py).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from hostaffinity.affinity.index import PodRecord
from hostaffinity.affinity.model import Taint
from hostaffinity.affinity.taints import (
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    describe_taint,
    tolerated,
)
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
)
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.scope import Scope, touched_pods


class NodeTaintsArgs(ScopedArgs, frozen=True):
    include_prefer_no_schedule: bool = False
    excluded_taints: list[str] = msgspec.field(default_factory=list)
    included_taints: list[str] = msgspec.field(default_factory=list)

    def validate(self) -> list[str]:
        errors = super().validate()
        if self.excluded_taints and self.included_taints:
            errors.append("only one of excludedTaints and includedTaints can be set")
        return errors


def _named(taint: Taint, names: list[str]) -> bool:
    return any(n == taint.key or n == f"{taint.key}={taint.value}" for n in names)


class NodeTaints:
    name: ClassVar[str] = "RemovePodsViolatingNodeTaints"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.NODE_TAINTS

    def __init__(self, args: NodeTaintsArgs) -> None:
        self.args = args
        self._scope = PodScope(args)
        effects = {NO_SCHEDULE}
        if args.include_prefer_no_schedule:
            effects.add(PREFER_NO_SCHEDULE)
        self._effects = frozenset(effects)

    def counts(self, taint: Taint) -> bool:
        """Whether this taint is one the strategy enforces."""
        if taint.effect not in self._effects:
            return False
        if self.args.included_taints:
            return _named(taint, self.args.included_taints)
        return not _named(taint, self.args.excluded_taints)

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        found: list[Violation] = []
        if scope is None:
            for taints, nodes in state.index.taint_groups().items():
                enforced = [t for t in taints if self.counts(t)]
                for node in sorted(nodes) if enforced else ():
                    for record in list(state.index.pods_on(node)):
                        found.extend(self._judge(state, record, enforced))
            return found
        # A pod's verdict reads only the pod and its own node's taints.
        for record in touched_pods(state, scope):
            on = state.index.node(record.node)
            enforced = [t for t in on.taints if self.counts(t)] if on is not None else []
            found.extend(self._judge(state, record, enforced))
        return found

    def _judge(
        self, state: ClusterState, record: PodRecord, enforced: list[Taint]
    ) -> list[Violation]:
        """The pod's violation, if it is in scope and does not tolerate an enforced taint."""
        pod = state.pods[record.key]
        if not enforced or not self._scope.covers(pod):
            return []
        for taint in enforced:
            if not tolerated(pod.spec.tolerations, taint):
                text = f"node {record.node} has taint {describe_taint(taint)} not tolerated"
                return [Violation(self.name, text, (record.key,), improves=self._untainted(state))]
        return []

    def _untainted(self, state: ClusterState) -> TargetCheck | None:
        """PreferNoSchedule is not filtered by kube-scheduler: check the target ourselves."""
        if PREFER_NO_SCHEDULE not in self._effects:
            return None

        def improves(pod_key: str, node: str) -> bool:
            record = state.index.node(node)
            pod = state.pods[pod_key]
            return record is None or not any(
                self.counts(t) and not tolerated(pod.spec.tolerations, t) for t in record.taints
            )

        return improves
