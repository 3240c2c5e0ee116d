"""PodTopologySpread's score: ScheduleAnyway constraints (or the profile's defaults), normalized.

Semantics: kubernetes pkg/scheduler/framework/plugins/podtopologyspread/scoring.go (PreScore,
Score, NormalizeScore) at v1.36. A node's raw score sums, per constraint whose key it carries,
`matching pods in its domain * log(domains + 2) + maxSkew - 1` (a `kubernetes.io/hostname`
constraint counts the node's own pods and weighs by the number of scored nodes), rounded half
away from zero. Normalized, fewer matching pods is better: `100 * (max + min - raw) / max`, and
100 for every node when all raw scores are 0. Nodes missing a key of the pod's own constraints
are not scored (0); the system defaults score them on the keys they have.

Only nodes in a domain that holds a matching pod (or missing a key) differ from the rest, so the
scores are kept sparse (scoring.SparseScores) like the engine's other plugins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence, Set

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import HOSTNAME_KEY
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.scoring import MAX_NODE_SCORE, SparseScores
from hostaffinity.affinity.spread_filtering import with_all_keys
from hostaffinity.affinity.topology_spread import (
    NodeInclusion,
    SpreadConstraint,
    counted_pods,
    domain_values,
)


def _round(score: float) -> int:
    """Go's math.Round for the non-negative raw scores: halves away from zero."""
    return math.floor(score + 0.5)


class ConstraintCounts:
    """One constraint's PreScore state: its weight and matching pods per domain (or node)."""

    def __init__(
        self,
        index: ClusterIndex,
        pod: Pod,
        constraint: SpreadConstraint,
        scored: Set[str],
        counted_on: Set[str],
        inclusion: NodeInclusion,
    ) -> None:
        self.constraint = constraint
        self.key = key = constraint.topology_key
        self.per_node = key == HOSTNAME_KEY
        self.counts: dict[str, int] = {}  # per domain, or per node for a hostname spread
        self.domains: frozenset[str] = frozenset()  # the scored domains (not per node)
        index_domain = index.domain
        if self.per_node:
            size = len(scored)
            for record in counted_pods(index, pod, constraint):
                if record.node in scored:
                    self.counts[record.node] = self.counts.get(record.node, 0) + 1
        else:
            # A node without the key is the domain "" (system defaults only): it widens the
            # weight but never earns a score, as in PreScore.
            values = set(domain_values(index, key, scored & index.nodes_with(key)))
            if not scored <= index.nodes_with(key):
                values.add("")
            self.domains = frozenset(values)
            size = len(values)
            eligible = inclusion.eligible(constraint, counted_on)
            for record in counted_pods(index, pod, constraint):
                if record.node in eligible:
                    value = index_domain(record.node, key) or ""
                    if value in values:
                        self.counts[value] = self.counts.get(value, 0) + 1
        self.size = size  # domains among the scored nodes (nodes, for a hostname spread)
        self.weight = math.log(size + 2)
        self._index = index

    def nodes_with_matches(self, scored: Set[str]) -> Set[str]:
        if self.per_node:
            return self.counts.keys() & scored
        by_value = self._index.domains(self.key)
        found: set[str] = set()
        for value in self.counts:
            found.update(by_value.get(value, ()))
        return found & scored

    def raw(self, node: str) -> float:
        """This constraint's part of a node's raw score (0 where the node lacks the key)."""
        value = self._index.domain(node, self.key)
        if value is None:
            return 0.0
        count = self.counts.get(node if self.per_node else value, 0)
        return count * self.weight + (self.constraint.max_skew - 1)


class PreScoreState:
    """PreScore's state: the nodes left unscored and each constraint's counts and weight."""

    def __init__(
        self,
        scored: Set[str],
        ignored: Set[str],
        complete: Set[str],
        parts: list[ConstraintCounts],
    ) -> None:
        self.scored = scored  # the asked nodes that get a score
        self.ignored = ignored  # the asked nodes missing a key of the pod's own spreads
        self.complete = complete  # nodes carrying every constraint's key
        self.parts = parts

    def scores(self) -> SparseScores:
        """Score and NormalizeScore over the asked nodes (ignored ones score 0)."""
        scored, parts = self.scored, self.parts
        special: set[str] = set(scored - self.complete)
        for part in parts:
            special.update(part.nodes_with_matches(scored))
        base = _round(sum(part.constraint.max_skew - 1 for part in parts))
        raw = {node: _round(sum(part.raw(node) for part in parts)) for node in special}
        values = list(raw.values())
        if len(special) < len(scored):
            values.append(base)
        if not values:
            return SparseScores(0)
        low, high = min(values), max(values)

        def normalize(score: int) -> int:
            return MAX_NODE_SCORE if high == 0 else MAX_NODE_SCORE * (high + low - score) // high

        result = {node: normalize(score) for node, score in raw.items()}
        result.update(dict.fromkeys(self.ignored, 0))
        return SparseScores(normalize(base) if len(special) < len(scored) else 0, result)


def prescore(
    index: ClusterIndex,
    pod: Pod,
    constraints: Sequence[SpreadConstraint],
    asked: Set[str],
    *,
    require_all_keys: bool,
    inclusion: NodeInclusion,
) -> PreScoreState | None:
    """PreScore for the asked (feasible) nodes; None when the plugin skips the pod (no
    constraint to score, or no node at all)."""
    if not constraints or not index.all_nodes():
        return None
    complete = with_all_keys(index, constraints)
    scored = asked & complete if require_all_keys else asked
    counted_on = complete if require_all_keys else index.all_nodes()
    parts = [ConstraintCounts(index, pod, c, scored, counted_on, inclusion) for c in constraints]
    return PreScoreState(scored, asked - scored, complete, parts)
