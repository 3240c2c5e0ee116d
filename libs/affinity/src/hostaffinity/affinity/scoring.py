"""Score normalization and the combined node score, as kube-scheduler computes them.

pkg/scheduler/framework/plugins/helper/normalize_score.go (DefaultNormalizeScore, used by
NodeAffinity and, reversed, TaintToleration) and interpodaffinity/scoring.go (min-max
NormalizeScore), v1.36. The combined score uses the default profile's plugin weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

MAX_NODE_SCORE: Final = 100
# An extender's prioritize answer is 0..10 (extender/v1 MaxExtenderPriority).
MAX_EXTENDER_PRIORITY: Final = 10
TAINT_TOLERATION_WEIGHT: Final = 3
NODE_AFFINITY_WEIGHT: Final = 2
INTER_POD_AFFINITY_WEIGHT: Final = 2


def normalize_default(raw: Mapping[str, int], *, reverse: bool) -> dict[str, int]:
    """Scale to 0..100 by the maximum; `reverse` turns "fewer is better" around."""
    highest = max(raw.values(), default=0)
    if highest == 0:
        return dict.fromkeys(raw, MAX_NODE_SCORE if reverse else 0)
    scaled = {node: MAX_NODE_SCORE * score // highest for node, score in raw.items()}
    if reverse:
        return {node: MAX_NODE_SCORE - score for node, score in scaled.items()}
    return scaled


def normalize_min_max(raw: Mapping[str, int]) -> dict[str, int]:
    """Scale to 0..100 between the lowest and highest score (scores may be negative)."""
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    spread = high - low
    if spread <= 0:
        return dict.fromkeys(raw, 0)
    return {node: int(MAX_NODE_SCORE * ((score - low) / spread)) for node, score in raw.items()}


class NodeScore(msgspec.Struct, frozen=True):
    """A node's normalized plugin scores (0..100 each) and their weighted sum."""

    taint_toleration: int
    node_affinity: int
    inter_pod_affinity: int
    total: int


class ScoreResult(msgspec.Struct, frozen=True):
    """Scores of the nodes asked about; `max_total` is the highest `total` could be."""

    scores: dict[str, NodeScore]
    max_total: int

    def extender_priorities(self) -> dict[str, int]:
        """The same ranking on the extender's 0..10 scale."""
        if self.max_total <= 0:
            return dict.fromkeys(self.scores, 0)
        return {
            node: score.total * MAX_EXTENDER_PRIORITY // self.max_total
            for node, score in self.scores.items()
        }
