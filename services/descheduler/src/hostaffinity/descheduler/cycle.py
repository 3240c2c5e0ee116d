"""One decision cycle: every profile's strategies in order, each violation through the planner.

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

from hostaffinity.descheduler.eviction_planner import EvictionPlanner, Plan
from hostaffinity.descheduler.policy import Policy
from hostaffinity.descheduler.state import ClusterState

_log = logging.getLogger(__name__)


@dataclass
class CycleReport:
    """The plan and how long each strategy took, in seconds."""

    plan: Plan
    seconds: float = 0.0
    per_strategy: dict[str, float] = field(default_factory=dict)
    violations: int = 0


def decide(
    state: ClusterState, policy: Policy, planner: EvictionPlanner, now: datetime
) -> CycleReport:
    """Run every profile once over the cache; returns the plan, the cache is left unchanged."""
    started = time.perf_counter()
    draft = planner.draft(state, now)
    per_strategy: dict[str, float] = {}
    violations = 0
    try:
        for profile in policy.profiles:
            for strategy in profile.strategies:
                began = time.perf_counter()
                found = strategy.violations(state)
                violations += len(found)
                for violation in found:
                    draft.resolve(violation, profile.protections)
                label = f"{profile.name}/{strategy.name}"
                per_strategy[label] = per_strategy.get(label, 0.0) + time.perf_counter() - began
    finally:
        plan = draft.finish()
    report = CycleReport(plan, time.perf_counter() - started, per_strategy, violations)
    _log.info(
        "cycle: %d violations, %d actions, %d skipped, %d VMIs staying in %.3fs",
        violations,
        len(plan.actions),
        len(plan.skipped),
        len(plan.stays),
        report.seconds,
    )
    return report
