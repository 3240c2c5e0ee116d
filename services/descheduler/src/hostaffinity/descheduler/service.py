"""The descheduler's work (the runner does argv, config, health, NATS, the Lease and SIGTERM):
the state fed by informers and the topology KV watch; cycles on every trigger, each plan handed
to the executor; the cluster's exposure counted from the same state for /metrics.

Ready (/readyz) once every feed has its initial list; no cycle runs before that (a plan made on
half a cluster could evict pods whose partners are simply not listed yet).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Final

import msgspec
from nats.errors import Error as NatsError

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.cooldowns import ReadBack, inherit_cooldowns
from hostaffinity.descheduler.core.cycle import CycleReport, decide, next_scope
from hostaffinity.descheduler.core.eviction_planner import EvictionPlanner, PlannerSettings, Skip
from hostaffinity.descheduler.core.policy import (
    DEFAULT_POLICY,
    Policy,
    PolicyError,
    load_policy,
    parse_policy,
)
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.descheduler.core.triggers import CycleTrigger
from hostaffinity.descheduler.executor import Executor
from hostaffinity.descheduler.exposure_gauge import ExposureGauge
from hostaffinity.descheduler.feeds import Feeds
from hostaffinity.descheduler.fleet_exposure import FleetExposure
from hostaffinity.descheduler.intents import Intents, finish
from hostaffinity.descheduler.metrics import DeschedulerMetrics
from hostaffinity.descheduler.placement_summary import PlacementSummary
from hostaffinity.descheduler.reporting import Reporter
from hostaffinity.descheduler.restart_required import PlacementsAwaitingRestart
from hostaffinity.runtime.bus.fleet_view import follow_fleet_view
from hostaffinity.runtime.bus.layout import PLACEMENTS_STREAM, TOPOLOGY_STREAM
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.process.config import ConfigError
from hostaffinity.runtime.runner import ServiceContext
from hostaffinity.schema import EVENTS_STREAM, PLACEMENTS_BUCKET

_log = logging.getLogger(__name__)
SYNC_POLL_SECONDS: Final = 0.2
# Reading a cooldown's worth of evictions back: a stream that takes longer is not waited for.
INHERIT_TIMEOUT_SECONDS: Final = 10.0
STATE_SYNCED: Final = "state synced"


def readiness_parts(_config: DeschedulerConfig) -> list[str]:
    """Every part of /readyz the work adds (the spec declares them up front)."""
    return [STATE_SYNCED]


def read_policy(config: DeschedulerConfig) -> Policy:
    """The configured DeschedulerPolicy file, or the built-in policy without one."""
    path = config.descheduler.policy_file
    return parse_policy(DEFAULT_POLICY) if path is None else load_policy(path)


def check_policy(config: DeschedulerConfig) -> None:
    """The policy loads as the work will load it, so `--check-config` and the start report a
    missing file, an unsupported plugin or a misspelt argument at once, not when the Lease is
    won."""
    try:
        read_policy(config)
    except PolicyError as error:
        raise ConfigError(f"descheduler.policy_file {error}") from error


class DeschedulingLoop:
    """Runs decision cycles until cancelled; the last report is kept for health and tests."""

    def __init__(
        self,
        state: ClusterState,
        policy: Policy,
        planner: EvictionPlanner,
        executor: Executor,
        trigger: CycleTrigger,
        metrics: DeschedulerMetrics,
        synced: Callable[[], bool],
        left_alone: Callable[[Skip, ClusterState], Awaitable[None]],
        before_first_cycle: Callable[[], None],
    ) -> None:
        self._state = state
        self._policy = policy
        self._planner = planner
        self._executor = executor
        self._trigger = trigger
        self._metrics = metrics
        self._synced = synced
        self._left_alone = left_alone
        self._before_first_cycle = before_first_cycle
        self.cycles = 0
        self.last: CycleReport | None = None
        # Changes a skipped cycle did not judge: the next cycle judges every pod.
        self._unjudged = False

    async def run(self) -> None:
        while not self._synced():  # noqa: ASYNC110 - the feeds expose no event for this
            await asyncio.sleep(SYNC_POLL_SECONDS)
        freeze_gc_after_initial_load()
        self._before_first_cycle()
        _log.info("state complete; descheduling")
        self._trigger.poke("state synced")
        while True:
            triggered = await self._trigger.next()
            if not self._synced():
                _log.warning("skipping a cycle: the state is incomplete (a feed is re-listing)")
                self._unjudged = True
                continue
            _log.info("cycle triggered by %s", "; ".join(triggered.reasons[:5]))
            last = None if self._unjudged else self.last
            scope = next_scope(triggered.scope, last, self._planner, self._state)
            report = decide(self._state, self._policy, self._planner, datetime.now(UTC), scope)
            self._unjudged = False
            self._metrics.cycle(report.seconds)
            self.cycles += 1
            self.last = report
            await self._executor.submit(report.plan)
            for skip in report.plan.skipped:
                _log.info("left alone (%s): %s -- %s", skip.strategy, skip.rule, skip.reasons)
                await self._left_alone(skip, self._state)


class DeschedulerWork:
    """The Lease holder's work; its parts stay visible for tests once started."""

    def __init__(self) -> None:
        self.state: ClusterState | None = None
        self.feeds: Feeds | None = None
        self.executor: Executor | None = None
        self.loop: DeschedulingLoop | None = None
        self.exposure: ExposureGauge | None = None
        self.summary: PlacementSummary | None = None

    def synced(self) -> bool:
        return self.feeds is not None and self.feeds.synced()

    async def __call__(self, ctx: ServiceContext[DeschedulerConfig]) -> None:
        config = ctx.config
        settings, shared = config.descheduler, config.shared
        policy = read_policy(config)
        ctx.add_readiness(STATE_SYNCED, self.synced)
        await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, EVENTS_STREAM, PLACEMENTS_STREAM])
        topology = await ctx.bus.topology(parked_as=ctx.service)
        state = self.state = ClusterState(
            physical_anti_affinity=shared.physical_anti_affinity,
            fail_unplaced=shared.fails_unplaced,
            fleet=FleetMembers(ctx.cluster.name),
        )
        metrics = DeschedulerMetrics(
            s.name for profile in policy.profiles for s in profile.strategies
        )
        trigger = CycleTrigger(settings.debounce_seconds, settings.interval_seconds)
        planner = EvictionPlanner(
            PlannerSettings(
                cooldown_seconds=settings.cooldown_seconds,
                dry_run=settings.dry_run,
                kubevirt_default_eviction_strategy=settings.kubevirt_default_eviction_strategy,
                migrations=settings.migrations,
            ),
            policy.limits,
        )
        read = await _inherit_cooldowns(ctx, planner, settings.cooldown_seconds)
        # Half the runner's drain for the outbox; the other half for attempts in flight.
        outbox = Outbox(ctx.service, ctx.bus.publish_event, drain_seconds=config.drain_seconds / 2)
        intents = Intents(ctx.bus.publish_event)
        reporter = Reporter(
            EventRecorder(ctx.kube, ctx.program, ctx.identity),
            outbox,
            intents,
            metrics,
            ctx.event_factory,
        )
        eviction = settings.eviction
        if eviction.grace_period_seconds is None and policy.grace_period_seconds is not None:
            eviction = msgspec.structs.replace(
                eviction, grace_period_seconds=policy.grace_period_seconds
            )
        executor = self.executor = Executor(
            ctx.kube,
            state,
            planner,
            eviction,
            reporter.intend,
            reporter.action,
            reporter.stay,
            trigger.poke,
            ensure_leading=ctx.ensure_leading,
        )
        summary = self.summary = PlacementSummary(state, ctx.cluster.name)
        awaiting_restart = PlacementsAwaitingRestart(
            state, EventRecorder(ctx.kube, ctx.program, ctx.identity)
        )
        feeds = self.feeds = Feeds(
            ctx.kube,
            topology,
            state,
            trigger,
            kubevirt=settings.kubevirt,
            on_migration=reporter.migration_changed,
            on_vm=awaiting_restart.vm_changed,
            on_vmi=awaiting_restart.vmi_changed,
            link=ctx.bus.link_epoch,
            on_placement=summary.placement_changed,
        )
        self.exposure = ExposureGauge(state, feeds.synced)

        def finish_unanswered() -> None:
            finished = finish(read.unanswered, state, outbox, planner, datetime.now(UTC))
            if read.unanswered:
                _log.info("%d of %d unanswered intents finished", finished, len(read.unanswered))

        self.loop = DeschedulingLoop(
            state,
            policy,
            planner,
            executor,
            trigger,
            metrics,
            feeds.synced,
            reporter.left_alone,
            finish_unanswered,
        )
        ctx.start(feeds.run(), name="feeds")
        ctx.start(
            follow_fleet_view(
                ctx.bus.js,
                state.fleet,
                link=ctx.bus.link_epoch,
                # Other clusters' members moved: RemovePodsViolatingFleetGroups judges every
                # member anyway, so the cycle needs no pod of this cluster in its scope.
                on_change=lambda: trigger.poke(
                    "another cluster's fleet group members moved", Scope()
                ),
            ),
            name="fleet-view",
        )
        # Stopping, attempts in flight finish and report before the outbox drains.
        ctx.start(outbox.run_with(executor.run()), name="executor")
        placements = await ctx.bus.js.key_value(PLACEMENTS_BUCKET)
        ctx.start(summary.run(placements, feeds.synced), name="placement-summary")
        if config.nats.fleet_install:
            exposed = FleetExposure(config.nats.fleet_install)
            ctx.start(exposed.run(ctx.bus.js), name="fleet-exposure")
        await self.loop.run()


async def _inherit_cooldowns(
    ctx: ServiceContext[DeschedulerConfig], planner: EvictionPlanner, cooldown_seconds: float
) -> ReadBack:
    """Before the first cycle: the cooldowns of the evictions an earlier Lease holder made, and
    its intents. A stream that does not answer in time costs them, not the work (said in the
    log)."""
    try:
        async with asyncio.timeout(INHERIT_TIMEOUT_SECONDS):
            read = await inherit_cooldowns(ctx.bus.js, planner, cooldown_seconds, datetime.now(UTC))
    except (NatsError, TimeoutError) as error:
        _log.warning("earlier evictions not read (%r): cooldowns start empty", error)
        return ReadBack()
    _log.info(
        "%d earlier evictions or migrations within the cooldown read back, %d unanswered intents",
        read.inherited,
        len(read.unanswered),
    )
    return read
