"""One decision cycle: every profile's strategies in order, each violation through the evictor.

Strategies of later profiles see the moves planned by earlier ones (the evictor places a chosen
pod on its target in the index until the cycle ends), so one pod is never chosen twice and a
pod moved away from a tainted node is not also counted as violating there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from hostaffinity.descheduler.evictor import Evictor, Plan
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


def decide(state: ClusterState, policy: Policy, evictor: Evictor, now: datetime) -> CycleReport:
    """Run every profile once over the cache; returns the plan, the cache is left unchanged."""
    started = time.perf_counter()
    cycle = evictor.begin(state, now)
    per_strategy: dict[str, float] = {}
    violations = 0
    try:
        for profile in policy.profiles:
            for strategy in profile.strategies:
                began = time.perf_counter()
                found = strategy.violations(state)
                violations += len(found)
                for violation in found:
                    cycle.resolve(violation, profile.protections)
                label = f"{profile.name}/{strategy.name}"
                per_strategy[label] = per_strategy.get(label, 0.0) + time.perf_counter() - began
    finally:
        plan = cycle.finish()
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
