"""Sampled `extender.decision` (and the webhook's `pod.mutated`) events: published off the
request path, never blocking it.

A pod is sampled by its uid, so all of one pod's decisions (filter, prioritize, bind) appear
together or not at all. Events wait in a bounded queue; when it is full, or NATS is away, they
are dropped and counted: an audit sample must never slow scheduling down.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable

from hostaffinity.runtime.cancellation import raise_if_cancel_requested
from hostaffinity.scheduler_extender.decide import Verdict
from hostaffinity.schema import Event, ExtenderDecision, event_id, utc_timestamp

_log = logging.getLogger(__name__)
SOURCE = "scheduler-extender"
_TYPE = "extender.decision"


def sampled(pod_uid: str, ratio: float) -> bool:
    """Deterministic per pod: the same uid is always in or always out of the sample."""
    return zlib.crc32(pod_uid.encode()) < ratio * 2**32


def decision_event(verb: str, pod: str, pod_uid: str, verdict: Verdict) -> ExtenderDecision:
    occurred_at = utc_timestamp()
    return ExtenderDecision(
        id=event_id(_TYPE, verb, pod_uid or pod, verdict.outcome, verdict.node, occurred_at),
        occurred_at=occurred_at,
        source=SOURCE,
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


class DecisionPublisher:
    """Queues sampled decisions; `run` publishes them until cancelled."""

    def __init__(
        self,
        publish: Callable[[Event], Awaitable[object]],
        *,
        ratio: float,
        capacity: int,
        on_drop: Callable[[], None],
    ) -> None:
        self._publish = publish
        self._ratio = ratio
        self._queue: asyncio.Queue[Event] = asyncio.Queue(capacity)
        self._on_drop = on_drop

    def offer(self, verb: str, pod: str, pod_uid: str, verdict: Verdict) -> None:
        """Queue the decision if its pod is sampled; drop it if the queue is full."""
        self.offer_event(pod_uid or pod, lambda: decision_event(verb, pod, pod_uid, verdict))

    def offer_event(self, key: str, build: Callable[[], Event]) -> None:
        """Queue the event `build` makes if `key` is sampled (built only then)."""
        if not sampled(key, self._ratio):
            return
        try:
            self._queue.put_nowait(build())
        except asyncio.QueueFull:
            self._on_drop()

    async def run(self) -> None:
        while True:
            raise_if_cancel_requested()  # a publish below may have swallowed it (Python 3.11)
            event = await self._queue.get()
            try:
                await self._publish(event)
            except Exception as error:
                # nats raises its own error types (timeouts, no responders, connection closed).
                self._on_drop()
                _log.warning("decision event %s not published: %r", event.id, error)
