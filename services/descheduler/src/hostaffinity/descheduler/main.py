"""`hostaffinity-descheduler`: config and policy, health, one active replica by Lease, then the
feeds, the durable `vm.moved` consumer, the cycle loop and the executor.

Ready (/readyz) once the state is complete (a standby replica is ready as it is). SIGTERM stops
the cycles, lets evictions in flight finish their call, and gives the Lease up.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from collections.abc import Sequence

import msgspec

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.evictor import Evictor, EvictorSettings
from hostaffinity.descheduler.executor import Executor
from hostaffinity.descheduler.feeds import Feeds
from hostaffinity.descheduler.metrics import DeschedulerMetrics
from hostaffinity.descheduler.policy import (
    DEFAULT_POLICY,
    Policy,
    PolicyError,
    load_policy,
    parse_policy,
)
from hostaffinity.descheduler.reporting import MANAGED_BY, SOURCE, Reporter
from hostaffinity.descheduler.service import CycleLoop
from hostaffinity.descheduler.state import ClusterState
from hostaffinity.descheduler.triggers import CycleTrigger
from hostaffinity.runtime.bus import Bus
from hostaffinity.runtime.config import ConfigError, load_config
from hostaffinity.runtime.consumer import ConsumerSettings, DurableConsumer
from hostaffinity.runtime.health import HealthServer
from hostaffinity.runtime.kube import KubeClient, api_client
from hostaffinity.runtime.kube_events import EventRecorder
from hostaffinity.runtime.leader import LeaderElector
from hostaffinity.runtime.telemetry import setup_telemetry
from hostaffinity.schema import decode_event, event_subject

_log = logging.getLogger(__name__)


def read_policy(config: DeschedulerConfig) -> Policy:
    path = config.descheduler.policy_file
    return parse_policy(DEFAULT_POLICY) if path is None else load_policy(path)


class DeschedulerService:
    """The running service; `feeds` and `loop` are set once this replica leads."""

    def __init__(self, config: DeschedulerConfig, policy: Policy, identity: str) -> None:
        self.config = config
        self.policy = policy
        self.identity = identity
        self.health = HealthServer(config.health.host, config.health.port)
        self.stopping = asyncio.Event()
        self.feeds: Feeds | None = None
        self.loop: CycleLoop | None = None
        self.state: ClusterState | None = None
        self.executor: Executor | None = None

    def ready(self) -> bool:
        return self.feeds is None or self.feeds.synced()

    async def run(self) -> None:
        self.health.add_readiness_check("state synced", self.ready)
        await self.health.start()
        api = await api_client(self.config.kubernetes)
        try:
            kube = KubeClient(api)
            lease = self.config.lease
            elector = LeaderElector(
                kube,
                namespace=lease.namespace,
                name=lease.name,
                identity=self.identity,
                lease_duration_s=lease.duration_seconds,
                renew_deadline_s=lease.renew_deadline_seconds,
                retry_period_s=lease.retry_period_seconds,
                on_lost=self.stopping.set,
            )
            async with elector:
                leading = asyncio.create_task(elector.wait_until_leader())
                stopped = asyncio.create_task(self.stopping.wait())
                await asyncio.wait({leading, stopped}, return_when=asyncio.FIRST_COMPLETED)
                leading.cancel()
                stopped.cancel()
                if elector.is_leader and not self.stopping.is_set():
                    await self._lead(kube)
        finally:
            await api.close()
            await self.health.stop()

    async def _lead(self, kube: KubeClient) -> None:
        _log.info("%s leads; descheduling", self.identity)
        config, settings = self.config, self.config.descheduler
        shared = config.shared
        bus = await Bus.connect(config.nats, name=f"hostaffinity-{SOURCE}-{self.identity}")
        try:
            topology = await bus.ensure_layout()
            state = self.state = ClusterState(
                physical_anti_affinity=shared.physical_anti_affinity == "cluster-wide",
                fail_unplaced=shared.unknown_placement == "fail",
            )
            metrics = DeschedulerMetrics()
            trigger = CycleTrigger(settings.debounce_seconds, settings.interval_seconds)
            evictor = Evictor(
                EvictorSettings(
                    cooldown_seconds=settings.cooldown_seconds,
                    dry_run=settings.dry_run,
                    kubevirt_default_eviction_strategy=settings.kubevirt_default_eviction_strategy,
                    migrations=settings.migrations,
                ),
                self.policy.limits,
            )
            reporter = Reporter(
                EventRecorder(kube, MANAGED_BY, self.identity), bus.publish_event, metrics
            )
            eviction = settings.eviction
            if eviction.grace_period_seconds is None and self.policy.grace_period_seconds:
                eviction = msgspec.structs.replace(
                    eviction, grace_period_seconds=self.policy.grace_period_seconds
                )
            executor = self.executor = Executor(
                kube, state, evictor, eviction, reporter.action, reporter.stay
            )
            feeds = self.feeds = Feeds(
                kube,
                topology,
                state,
                trigger,
                kubevirt=settings.kubevirt,
                on_migration=reporter.migration_changed,
            )
            consumer = DurableConsumer(
                bus.js,
                service=SOURCE,
                settings=ConsumerSettings(
                    durable=settings.consumer_durable, filter_subject=event_subject("vm.moved")
                ),
                decode=decode_event,
                handler=feeds.on_event,
            )
            loop = self.loop = CycleLoop(
                state, self.policy, evictor, executor, trigger, metrics, feeds.synced
            )
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(feeds.run()),
                    group.create_task(consumer.run()),
                    group.create_task(executor.run()),
                    group.create_task(loop.run()),
                    group.create_task(_freeze_once_synced(feeds)),
                ]
                await self.stopping.wait()
                for task in tasks:
                    task.cancel()
        finally:
            await bus.close()


async def _freeze_once_synced(feeds: Feeds) -> None:
    """After the first full lists, spare the big long-lived state from full GC passes."""
    while not feeds.synced():  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    freeze_gc_after_initial_load()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hostaffinity-descheduler", description=__doc__)
    parser.add_argument(
        "--config", action="append", default=[], help="YAML file; repeat to layer files"
    )
    parser.add_argument(
        "--check-config", action="store_true", help="load the config and policy, then exit"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(DeschedulerConfig, args.config)
        policy = read_policy(config)
    except (ConfigError, PolicyError) as error:
        parser.exit(2, f"hostaffinity-descheduler: {error}\n")
    if args.check_config:
        parser.exit(0, "configuration and policy are valid\n")
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(_serve(config, policy))


async def _serve(config: DeschedulerConfig, policy: Policy) -> None:
    telemetry = setup_telemetry(f"hostaffinity-{SOURCE}")
    identity = os.environ.get("POD_NAME") or socket.gethostname()
    service = DeschedulerService(config, policy, identity)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, service.stopping.set)
    try:
        await service.run()
    finally:
        telemetry.shutdown()
