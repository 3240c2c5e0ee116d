"""The descheduler at work: wait for the state to be complete, then run a cycle on every
trigger and hand the plan to the executor. One instance does this at a time (the Lease is taken
in main.py before any of it starts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from hostaffinity.descheduler.cycle import CycleReport, decide
from hostaffinity.descheduler.evictor import Evictor
from hostaffinity.descheduler.executor import Executor
from hostaffinity.descheduler.metrics import DeschedulerMetrics
from hostaffinity.descheduler.policy import Policy
from hostaffinity.descheduler.state import ClusterState
from hostaffinity.descheduler.triggers import CycleTrigger

_log = logging.getLogger(__name__)
SYNC_POLL_SECONDS: Final = 0.2


class CycleLoop:
    """Runs decision cycles until cancelled; the last report is kept for health and tests."""

    def __init__(
        self,
        state: ClusterState,
        policy: Policy,
        evictor: Evictor,
        executor: Executor,
        trigger: CycleTrigger,
        metrics: DeschedulerMetrics,
        synced: Callable[[], bool],
    ) -> None:
        self._state = state
        self._policy = policy
        self._evictor = evictor
        self._executor = executor
        self._trigger = trigger
        self._metrics = metrics
        self._synced = synced
        self.cycles = 0
        self.last: CycleReport | None = None

    async def run(self) -> None:
        while not self._synced():  # noqa: ASYNC110 - the feeds expose no event for this
            await asyncio.sleep(SYNC_POLL_SECONDS)
        _log.info("state complete; descheduling")
        self._trigger.poke("state synced")
        while True:
            reasons = await self._trigger.next()
            if not self._synced():
                _log.warning("skipping a cycle: the state is incomplete (a feed is re-listing)")
                continue
            _log.info("cycle triggered by %s", "; ".join(reasons[:5]))
            report = decide(self._state, self._policy, self._evictor, datetime.now(UTC))
            self._metrics.cycle(report.seconds)
            self.cycles += 1
            self.last = report
            for skip in report.plan.skipped:
                _log.info("left alone (%s): %s -- %s", skip.strategy, skip.rule, skip.reasons)
            await self._executor.submit(report.plan)
