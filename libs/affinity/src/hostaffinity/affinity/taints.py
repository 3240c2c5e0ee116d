"""Taints and tolerations: the TaintToleration and NodeUnschedulable plugins' decisions.

Semantics: k8s.io/api/core/v1/toleration.go (ToleratesTaint) and
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go at v1.36. An empty toleration
key matches every key (only with Exists), an empty effect every effect; the filter looks at
NoSchedule and NoExecute taints only, the score counts untolerated PreferNoSchedule taints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from hostaffinity.affinity.model import Taint, Toleration

NO_SCHEDULE: Final = "NoSchedule"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
NO_EXECUTE: Final = "NoExecute"
# The taint NodeUnschedulable checks a cordoned node against (node_unschedulable.go).
UNSCHEDULABLE_TAINT: Final = Taint(key="node.kubernetes.io/unschedulable", effect=NO_SCHEDULE)

_FILTER_EFFECTS: Final = frozenset({NO_SCHEDULE, NO_EXECUTE})


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Whether one toleration tolerates one taint (Toleration.ToleratesTaint)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of the tolerations tolerates the taint."""
    return any(tolerates(t, taint) for t in tolerations)


def first_untolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Taint | None:
    """The first NoSchedule/NoExecute taint the pod does not tolerate, if any."""
    for taint in taints:
        if taint.effect in _FILTER_EFFECTS and not tolerated(tolerations, taint):
            return taint
    return None


def intolerable_preferences(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> int:
    """How many PreferNoSchedule taints the pod does not tolerate (the plugin's raw score).

    Only tolerations with an empty or PreferNoSchedule effect count here
    (getAllTolerationPreferNoSchedule).
    """
    soft = [t for t in tolerations if t.effect in ("", PREFER_NO_SCHEDULE)]
    return sum(
        1 for taint in taints if taint.effect == PREFER_NO_SCHEDULE and not tolerated(soft, taint)
    )


def describe_taint(taint: Taint) -> str:
    """kubectl's form: `key=value:Effect`."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"
