"""Score normalization and the combined node score, as kube-scheduler computes them.

pkg/scheduler/framework/plugins/helper/normalize_score.go (DefaultNormalizeScore, used by
NodeAffinity and, reversed, TaintToleration) and interpodaffinity/scoring.go (min-max
NormalizeScore), v1.36. The combined score uses the default profile's plugin weights.

Scores are kept sparse (SparseScores): in a large cluster almost every node has a raw score of 0
for a plugin, so normalizing and weighting cost one computation for all of those plus one per
node that differs, and nothing is built per node until an answer lists the nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence, Set
from itertools import repeat
from typing import Final

import msgspec

MAX_NODE_SCORE: Final = 100
# An extender's prioritize answer is 0..10 (extender/v1 MaxExtenderPriority).
MAX_EXTENDER_PRIORITY: Final = 10
TAINT_TOLERATION_WEIGHT: Final = 3
NODE_AFFINITY_WEIGHT: Final = 2
INTER_POD_AFFINITY_WEIGHT: Final = 2
POD_TOPOLOGY_SPREAD_WEIGHT: Final = 2


class SparseScores(msgspec.Struct, frozen=True, gc=False):
    """A score per node: `special` for the nodes listed there, `base` for every other node."""

    base: int
    special: dict[str, int] = msgspec.field(default_factory=dict)

    def of(self, node: str) -> int:
        return self.special.get(node, self.base)

    def over(self, nodes: Sequence[str]) -> Iterator[int]:
        """The scores of `nodes`, in order (a C-level loop: no Python call per node)."""
        return map(self.special.get, nodes, repeat(self.base))


# Disjoint sets of nodes, each with the score every node in it has (a topology domain's).
Groups = Sequence[tuple[int, Set[str]]]


def combine(
    formula: Callable[..., int],
    *parts: SparseScores,
    grouped: tuple[int, Groups] | None = None,
) -> SparseScores:
    """`formula` of the parts' scores, node by node.

    Computed once per distinct combination of scores (a domain's nodes share theirs), leaving
    the per-node work to C-level maps and zips: a zone-wide term credits thousands of nodes.
    With several varying parts, the largest is combined that way with the others at their
    base, and only the nodes the smaller parts list are computed again from every part.
    `grouped` names a part (by position) whose `special` lists exactly these groups (as
    `normalize_min_max_groups` makes it): that part is expanded group by group instead, with
    no pass over its nodes.
    """
    varying = [i for i, part in enumerate(parts) if part.special]
    args = [part.base for part in parts]
    base = formula(*args)
    if not varying:
        return SparseScores(base)

    def at(position: int, score: int) -> int:
        args[position] = score
        value = formula(*args)
        args[position] = parts[position].base
        return value

    combined: dict[str, int] = {}
    if grouped is not None and grouped[0] in varying:
        first = grouped[0]
        for score, nodes in grouped[1]:
            value = at(first, score)
            if value != base:
                combined.update(dict.fromkeys(nodes, value))
    else:
        first = max(varying, key=lambda i: len(parts[i].special))
        special = parts[first].special
        results = {score: at(first, score) for score in set(special.values())}
        combined.update(zip(special, map(results.__getitem__, special.values()), strict=True))
    if len(varying) > 1:
        others = list(set().union(*(parts[i].special for i in varying if i != first)))
        keys = list(zip(*(part.over(others) for part in parts), strict=True))
        by_key = {key: formula(*key) for key in set(keys)}
        combined.update(zip(others, map(by_key.__getitem__, keys), strict=True))
    return SparseScores(base, combined)


def normalize_default(raw: SparseScores, nodes: int, *, reverse: bool) -> SparseScores:
    """Scale to 0..100 by the maximum; `reverse` turns "fewer is better" around.

    `raw` has base 0: the `nodes` scored (a count) not in its `special` have a raw score of 0.
    """
    highest = max(raw.special.values(), default=0)
    if len(raw.special) < nodes:
        highest = max(highest, 0)
    if highest == 0:
        return SparseScores(MAX_NODE_SCORE if reverse else 0)
    if reverse:
        return combine(lambda score: MAX_NODE_SCORE - MAX_NODE_SCORE * score // highest, raw)
    return combine(lambda score: MAX_NODE_SCORE * score // highest, raw)


def normalize_min_max(raw: SparseScores, nodes: int) -> SparseScores:
    """Scale to 0..100 between the lowest and highest score (scores may be negative).

    `raw` has base 0: the `nodes` scored (a count) not in its `special` have a raw score of 0.
    """
    values = list(raw.special.values())
    if len(values) < nodes:
        values.append(0)
    if not values:
        return SparseScores(0)
    low, high = min(values), max(values)
    spread = high - low
    if spread <= 0:
        return SparseScores(0)
    return combine(lambda score: int(MAX_NODE_SCORE * ((score - low) / spread)), raw)


def normalize_min_max_groups(groups: Groups, others: int) -> tuple[SparseScores, Groups]:
    """`normalize_min_max` of raw scores given per group of nodes (disjoint node sets that
    share a raw score: a topology domain), plus `others` nodes with a raw score of 0; with the
    groups the result lists, normalized, for `combine(grouped=...)`.

    The scores are normalized once per group, and only the groups that end up off the base
    score are listed node by node: a zone-wide term no longer costs a pass over every node per
    step. When the groups cover every node scored (`others` is 0), the base is the largest
    group's score, so that group is not listed either.
    """
    values = [raw for raw, _ in groups]
    if others:
        values.append(0)
    if not values:
        return SparseScores(0), ()
    low, high = min(values), max(values)
    spread = high - low
    if spread <= 0:
        return SparseScores(0), ()

    def scale(score: int) -> int:
        return int(MAX_NODE_SCORE * ((score - low) / spread))

    base = scale(max(groups, key=lambda group: len(group[1]))[0] if not others else 0)
    listed = [(score, nodes) for raw, nodes in groups if (score := scale(raw)) != base]
    special: dict[str, int] = {}
    for score, nodes in listed:
        special.update(dict.fromkeys(nodes, score))
    return SparseScores(base, special), listed


class NodeScore(msgspec.Struct, frozen=True):
    """A node's normalized plugin scores (0..100 each) and their weighted sum."""

    taint_toleration: int
    node_affinity: int
    inter_pod_affinity: int
    total: int
    topology_spread: int = 0


class ScoreResult(msgspec.Struct, frozen=True):
    """Scores of the known nodes asked about (`nodes`, in the order asked), per plugin and
    weighted; `max_total` is the highest `total` could be (a plugin that skipped the pod, as
    PodTopologySpread does for a pod without spreads to score, adds nothing to it)."""

    nodes: list[str]
    taint_toleration: SparseScores
    node_affinity: SparseScores
    inter_pod_affinity: SparseScores
    total: SparseScores
    max_total: int
    topology_spread: SparseScores = msgspec.field(default_factory=lambda: SparseScores(0))

    @property
    def scores(self) -> dict[str, NodeScore]:
        """Each node's breakdown: one object per node, for reports rather than hot paths."""
        return {
            node: NodeScore(
                self.taint_toleration.of(node),
                self.node_affinity.of(node),
                self.inter_pod_affinity.of(node),
                self.total.of(node),
                self.topology_spread.of(node),
            )
            for node in self.nodes
        }

    def extender_priorities(self) -> dict[str, int]:
        """The same ranking on the extender's 0..10 scale."""
        if self.max_total <= 0:
            return dict.fromkeys(self.nodes, 0)
        top = self.max_total
        priorities = combine(lambda total: total * MAX_EXTENDER_PRIORITY // top, self.total)
        return dict(zip(self.nodes, priorities.over(self.nodes), strict=True))
