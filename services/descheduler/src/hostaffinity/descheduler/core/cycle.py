"""One decision cycle: every profile's strategies in order, each violation through the planner.

A cycle started only by changes is scoped (strategies/scope.py): each strategy judges the pods
those changes can put in violation, not every pod.

"Cycle" means only this one pass over the cache (upstream's descheduling cycle): a CycleTrigger
starts it, the planner's PlanDraft holds its plan while it is built, the DeschedulingLoop runs
one after another, and the executor carries the finished plan out afterwards.

Strategies of later profiles see the moves planned by earlier ones (the planner places a chosen
pod on its target in the index until the cycle ends), so one pod is never chosen twice and a
pod moved away from a tainted node is not also counted as violating there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from hostaffinity.descheduler.core.eviction_planner import EvictionPlanner, Plan
from hostaffinity.descheduler.core.policy import Policy
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.scope import Scope, narrowed

_log = logging.getLogger(__name__)


@dataclass
class CycleReport:
    """The plan and how long each strategy took, in seconds."""

    plan: Plan
    seconds: float = 0.0
    per_strategy: dict[str, float] = field(default_factory=dict)
    violations: int = 0
    scope: Scope | None = None  # what the cycle judged (None: every pod)


def decide(
    state: ClusterState,
    policy: Policy,
    planner: EvictionPlanner,
    now: datetime,
    scope: Scope | None = None,
) -> CycleReport:
    """Run every profile once over the cache, or over what `scope` names (None: everything);
    returns the plan, the cache is left unchanged."""
    started = time.perf_counter()
    draft = planner.draft(state, now)
    per_strategy: dict[str, float] = {}
    violations = 0
    try:
        for profile in policy.profiles:
            for strategy in profile.strategies:
                began = time.perf_counter()
                found = strategy.violations(state, scope)
                violations += len(found)
                for violation in found:
                    draft.resolve(violation, profile.protections)
                label = f"{profile.name}/{strategy.name}"
                per_strategy[label] = per_strategy.get(label, 0.0) + time.perf_counter() - began
    finally:
        plan = draft.finish()
    report = CycleReport(plan, time.perf_counter() - started, per_strategy, violations, scope)
    _log.info(
        "cycle (%s): %d violations, %d actions, %d skipped, %d VMIs staying in %.3fs",
        "full" if scope is None else f"scoped to {scope.describe()}",
        violations,
        len(plan.actions),
        len(plan.skipped),
        len(plan.stays),
        report.seconds,
    )
    return report


def next_scope(
    changed: Scope | None, last: CycleReport | None, planner: EvictionPlanner, state: ClusterState
) -> Scope | None:
    """What the next cycle judges: the changes since the last cycle, plus the pods the last one
    chose (an eviction that failed, or dry-run, leaves them in violation), the candidates of the
    violations it left alone and the pods due for another try (a change anywhere -- a node
    Ready, room freed, a new cycle's limits -- may let them go now). None, a full cycle, for
    the first cycle, a trigger that names no change, or a scope as large as a few percent of
    the cluster."""
    if changed is None or last is None:
        return None
    changed.pods.update(action.pod for action in last.plan.actions)
    changed.pods.update(pod for skip in last.plan.skipped for pod, _ in skip.reasons)
    changed.pods.update(planner.retrying)
    return narrowed(changed, state)
