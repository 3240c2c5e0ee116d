"""`hostaffinity-scheduler-extender`: wires config, cache feeds, HTTP server, health and events.

Ready (/readyz) once Pods, Nodes, Namespaces and placements are all loaded; until then filter and
prioritize answer with an error, which kube-scheduler skips for an `ignorable` extender. SIGTERM
stops taking requests, lets the ones in flight finish, and closes the bus.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.runtime.bus import Bus
from hostaffinity.runtime.config import ConfigError, load_config
from hostaffinity.runtime.health import HealthServer
from hostaffinity.runtime.kube import KubeClient, api_client
from hostaffinity.runtime.telemetry import setup_telemetry
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.cache import SOURCES, ExtenderCache
from hostaffinity.scheduler_extender.config import SchedulerExtenderSettings
from hostaffinity.scheduler_extender.decisions import SOURCE, DecisionPublisher
from hostaffinity.scheduler_extender.feeds import CacheFeeds
from hostaffinity.scheduler_extender.http import ExtenderServer, server_tls
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics

_log = logging.getLogger(__name__)
SYNC_POLL_SECONDS = 0.5


def build_cache(settings: SchedulerExtenderSettings) -> ExtenderCache:
    shared = settings.shared
    return ExtenderCache(
        physical_anti_affinity=shared.physical_anti_affinity == "cluster-wide",
        fail_unplaced=shared.unknown_placement == "fail",
        inflight_capacity=settings.extender.inflight_capacity,
        inflight_max_age_seconds=settings.extender.inflight_max_age_seconds,
    )


@dataclass(frozen=True)
class RunningExtender:
    """The parts of a started extender that callers (and tests) look at."""

    cache: ExtenderCache
    server: ExtenderServer
    health: HealthServer
    feeds: CacheFeeds


@contextlib.asynccontextmanager
async def running_extender(settings: SchedulerExtenderSettings) -> AsyncIterator[RunningExtender]:
    """Everything started; on exit the HTTP server finishes its requests first, then the feeds,
    the publisher and the connections stop."""
    cache = build_cache(settings)
    health = HealthServer(settings.health.host, settings.health.port)
    for source in SOURCES:
        health.add_readiness_check(f"{source} synced", functools.partial(cache.is_synced, source))
    bus = await Bus.connect(settings.nats, name=SOURCE)
    try:
        topology = await bus.ensure_layout()
        async with await api_client(settings.kubernetes) as api, asyncio.TaskGroup() as group:
            client = KubeClient(api)
            feeds = CacheFeeds(client, topology, cache, link=bus.link_epoch)
            metrics = ExtenderMetrics(cache, stale=feeds.stale, lag=feeds.lag)
            decisions = DecisionPublisher(
                bus.publish_event,
                ratio=settings.extender.decision_sample_ratio,
                capacity=settings.extender.decision_queue_size,
                on_drop=metrics.dropped_event,
            )
            tasks = [
                group.create_task(feeds.run()),
                group.create_task(decisions.run()),
            ]
            server = ExtenderServer(
                cache,
                Binder(client, settings.extender.bind_timeout_seconds),
                metrics,
                decisions,
                max_body_bytes=settings.extender.max_body_bytes,
                inflight_wait_seconds=settings.extender.inflight_wait_seconds,
            )
            tls = server_tls(settings.extender.tls_cert_file, settings.extender.tls_key_file)
            await health.start()
            await server.start(settings.extender.host, settings.extender.port, tls)
            try:
                yield RunningExtender(cache, server, health, feeds)
            finally:
                await server.stop()
                await health.stop()
                for task in tasks:
                    task.cancel()
    finally:
        await bus.close()


async def serve(settings: SchedulerExtenderSettings) -> None:
    """Run until SIGTERM or SIGINT."""
    telemetry = setup_telemetry(SOURCE)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with running_extender(settings) as running:
            _log.info("scheduler-extender listening on port %d", running.server.port)
            freezing = asyncio.create_task(_freeze_gc_once_synced(running.cache))
            await stop.wait()
            freezing.cancel()
            _log.info("stopping: finishing requests in flight")
    finally:
        telemetry.shutdown()


async def _freeze_gc_once_synced(cache: ExtenderCache) -> None:
    """After the first full lists, spare the big long-lived cache from full GC passes."""
    while not all(cache.is_synced(source) for source in SOURCES):  # noqa: ASYNC110
        await asyncio.sleep(SYNC_POLL_SECONDS)
    freeze_gc_after_initial_load()
    _log.info("cache synced; garbage collector frozen over the initial state")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hostaffinity-scheduler-extender")
    parser.add_argument(
        "--config", action="append", default=[], help="YAML file; repeat to layer files"
    )
    args = parser.parse_args(argv)
    try:
        settings = load_config(SchedulerExtenderSettings, args.config)
    except ConfigError as error:
        parser.exit(2, f"hostaffinity-scheduler-extender: {error}\n")
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(serve(settings))
