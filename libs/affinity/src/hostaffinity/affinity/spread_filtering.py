"""PodTopologySpread's filter: DoNotSchedule constraints, kube-scheduler's answers from the index.

Semantics: kubernetes pkg/scheduler/framework/plugins/podtopologyspread/filtering.go
(calPreFilterState, Filter) at v1.36. Matching pods are counted per topology domain over the
eligible nodes -- those carrying every constraint's key and let in by the constraint's node
inclusion policies -- and a node fails when `matching pods in its domain + 1 if the pod matches
itself - global minimum > maxSkew`; the global minimum is 0 while fewer than `minDomains`
domains are eligible. A node without a constraint's key fails with the missing-label reason.

Counts come from the index's label buckets, so a decision costs the pods the selector matches
(a spread's replicas), not the cluster; only domains holding a matching pod can fail.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Set
from typing import Final

import msgspec

from hostaffinity.affinity import explain
from hostaffinity.affinity.explain import Rejection
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.topology_spread import (
    NodeInclusion,
    SpreadConstraint,
    counted_pods,
    domain_values,
)

# criticalPaths' initial MatchNum: the minimum when no node is eligible at all.
_MAX_INT32: Final = 2**31 - 1
_NONE: Final[frozenset[str]] = frozenset()


class DomainCounts(msgspec.Struct, frozen=True):
    """One topology key's PreFilter state: matching pods per domain over the eligible nodes.

    `counts` leaves out domains without a matching pod; `domains` is how many domains the
    eligible nodes form (TpKeyToDomainsNum); `global_min` the fewest matching pods in one.
    """

    key: str
    counts: dict[str, int]
    domains: int
    global_min: int

    def count(self, value: str) -> int:
        return self.counts.get(value, 0)

    def min_match(self, constraint: SpreadConstraint) -> int:
        """The global minimum a constraint's skew is measured from (minMatchNum)."""
        return 0 if self.domains < constraint.min_domains else self.global_min


def with_all_keys(index: ClusterIndex, constraints: Sequence[SpreadConstraint]) -> Set[str]:
    """Nodes carrying every constraint's topology key (nodeLabelsMatchSpreadConstraints)."""
    keys = list(dict.fromkeys(c.topology_key for c in constraints))
    nodes = index.nodes_with(keys[0]) if keys else index.all_nodes()
    for key in keys[1:]:
        nodes = nodes & index.nodes_with(key)
    return nodes


def prefilter_counts(
    index: ClusterIndex,
    pod: Pod,
    constraints: Sequence[SpreadConstraint],
    inclusion: NodeInclusion,
    *,
    include_self: bool = False,
) -> dict[str, DomainCounts]:
    """calPreFilterState: the counts per topology key of the pod's DoNotSchedule constraints
    (with `include_self`, an assigned pod counts itself: the spread as it stands).

    kube-scheduler keys its counts by topology key: where two constraints share a key, a node's
    pods are counted for the last of them that includes the node (its per-node map is
    overwritten), which is what the loop in reverse reproduces.
    """
    candidates = with_all_keys(index, constraints)
    by_key: dict[str, list[SpreadConstraint]] = {}
    for constraint in constraints:
        by_key.setdefault(constraint.topology_key, []).append(constraint)
    state: dict[str, DomainCounts] = {}
    for key, group in by_key.items():
        counts: dict[str, int] = {}
        covered: Set[str] = _NONE
        for constraint in reversed(group):
            eligible = inclusion.eligible(constraint, candidates)
            for record in counted_pods(index, pod, constraint, include_self=include_self):
                if record.node in eligible and record.node not in covered:
                    value = index.domain(record.node, key)
                    if value is not None:
                        counts[value] = counts.get(value, 0) + 1
            covered = eligible if not covered else covered | eligible
        domains = len(domain_values(index, key, covered))
        lowest = min(counts.values()) if len(counts) == domains and counts else 0
        state[key] = DomainCounts(key, counts, domains, _MAX_INT32 if not domains else lowest)
    return state


def filter_stages(
    index: ClusterIndex,
    pod: Pod,
    constraints: Sequence[SpreadConstraint],
    inclusion: NodeInclusion,
) -> Iterator[tuple[Set[str], Rejection]]:
    """Filter's rejections, constraint by constraint in the pod's order (first failure wins)."""
    if not constraints:
        return
    state = prefilter_counts(index, pod, constraints, inclusion)
    labels = pod.metadata.labels
    for constraint in constraints:
        key = constraint.topology_key
        yield index.nodes_without(key), explain.spread_missing_label(constraint)
        counts = state[key]
        itself = 1 if constraint.selector.matches(labels) else 0
        low = counts.min_match(constraint)
        allowed = constraint.max_skew - itself + low  # more matching pods than this fail
        by_value = index.domains(key)
        values = by_value.keys() if allowed < 0 else counts.counts.keys()
        described = ""
        for value in values:
            matching = counts.count(value)
            if matching > allowed:
                described = described or constraint.describe()
                why = explain.spread_skew(constraint, value, matching, itself, low, described)
                yield by_value.get(value, _NONE), why
