"""The extender's sampled `extender.decision` events (published by
hostaffinity.runtime.bus.sampled).

A pod is sampled by its uid, so all of one pod's decisions (filter, prioritize, bind) appear
together or not at all.
"""

from __future__ import annotations

from hostaffinity.scheduler_extender.core.answers import Verdict
from hostaffinity.schema import EventFactory, ExtenderDecision, utc_timestamp


def decision_event(
    event_factory: EventFactory, verb: str, pod: str, pod_uid: str, verdict: Verdict
) -> ExtenderDecision:
    occurred_at = utc_timestamp()
    return event_factory.new(
        ExtenderDecision,
        verb,
        pod_uid or pod,
        verdict.outcome,
        verdict.node,
        occurred_at,
        occurred_at=occurred_at,
        verb=verb,
        pod=pod,
        pod_uid=pod_uid,
        outcome=verdict.outcome,
        nodes_asked=verdict.asked,
        nodes_passed=verdict.passed,
        node=verdict.node,
        rejections=verdict.rejections,
        message=verdict.message,
    )
