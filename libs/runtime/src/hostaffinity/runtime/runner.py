"""The one runner every hostaffinity service starts through (as `kopf.run` is for operators).

A service's `main.py` is wiring only: it names the service, its config record and its *work*,
an async function the runner calls with a `ServiceContext` once everything is in place::

    from collections.abc import Sequence

    from hostaffinity.runtime.process.config import LeaderElectedSettings
    from hostaffinity.runtime.runner import ServiceContext, ServiceSpec, run_service


    class DrsTranslatorConfig(LeaderElectedSettings, frozen=True):
        dry_run: bool = False


    async def translate(ctx: ServiceContext[DrsTranslatorConfig]) -> None:
        store = await ctx.bus.topology()                # NATS is connected, the bus provisioned
        pods = Informer(ctx.kube, PODS, on_pod, msgspec_decoder(Pod))
        ctx.add_readiness("pods synced", pods.synced.is_set)
        ctx.start(pods.run(), name="pods")             # a sibling task in the work's TaskGroup
        await apply_rules(ctx.config, store)           # runs until cancelled


    SPEC = ServiceSpec(
        name="drs-translator",
        config_type=DrsTranslatorConfig,
        work=translate,
        leader_elected=True,
        readiness=lambda config: ["pods synced"],      # every part the work will add
    )


    def main(argv: Sequence[str] | None = None) -> None:
        run_service(SPEC, argv)

What the runner does, in order: argv (`--config FILE` repeatable, later files win; `--version`;
`--check-config` loads the config and runs the service's `checks` and `probes`, prints the config
and exits 0, or exits 2 with one line naming the setting to fix, or 1 when a probe could not reach
what it checks), the service's `checks` (a bad config ends the start with exit 2), logging
(`logging.format`: text or JSON lines), telemetry, the health server (/readyz is the AND of
named parts: "nats connected", "cluster identity known" plus whatever the work adds), the
Kubernetes client (with the timeouts of `KubernetesSettings`), the cluster identity
(kube/cluster_identity.py, read until the API answers), the NATS connection (retried with
backoff until it succeeds), then, for a `leader_elected` service, waiting for the Lease, then
the work in an asyncio TaskGroup.

Stopping: SIGTERM or SIGINT cancels the work and gives it `drain_seconds` to unwind (an HTTP
server finishes its requests in a `finally`), then gives the Lease up, closes NATS and exits 0.
A work that fails exits 1. A work that returns ends the service (exit 0).

Lease gating: the work starts only once this replica holds the Lease. When the elector steps
down (no renewal *succeeded* within `lease.renew_deadline_seconds`, or a rival holds the Lease)
the work is cancelled at once and must unwind within `lease.duration_seconds -
lease.renew_deadline_seconds`, the time before a rival may take the Lease over. The process then
exits with status 1 (`EXIT_LEADERSHIP_LOST`) rather than going back to standby: the Deployment
restarts it as a fresh standby, so no state of the lost term survives into the next. Work that
does not unwind in time ends the process at once (`os._exit`), since it may still be writing.
While it leads, the elector writes the replica's readiness on the Lease at each renewal
(annotation `hostaffinity.io/readiness`), where `hostaffinity status` reads a partial outage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import msgspec

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.http.health import HealthServer, ReadinessCheck, ReadinessDetail
from hostaffinity.runtime.http.refusals import quiet_malformed_requests
from hostaffinity.runtime.kube.client import KubeClient, api_client
from hostaffinity.runtime.kube.cluster_identity import (
    ClusterIdentity,
    ClusterIdentityUnknown,
    read_cluster_identity,
)
from hostaffinity.runtime.kube.leader import LeaderElector, no_fence
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.process.config import (
    ConfigError,
    LeaderElectedSettings,
    LeaseSettings,
    LoggingSettings,
    ServiceSettings,
    load_config,
)
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.schema.event_factory import EventFactory
from hostaffinity.schema.names import ANNOTATION_READINESS
from hostaffinity.schema.readiness import encode_readiness
from hostaffinity.schema.version import release_version

C = TypeVar("C", bound=ServiceSettings)
T = TypeVar("T")

EXIT_FAILED: Final = 1
EXIT_LEADERSHIP_LOST: Final = 1
EXIT_BAD_CONFIG: Final = 2

_log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """The Lease was lost while the work ran; the work has been cancelled."""


class DrainTimeout(Exception):
    """The work did not unwind within its bound after being cancelled."""


def no_parts(_config: Any) -> Sequence[str]:
    return ()


# The part of /readyz both vCenter services add per vCenter: its connection is up.
VCENTER_CONNECTED: Final = "vcenter connected"


def vcenter_part(part: str, vcenter: str) -> str:
    """A part of one vCenter's own, as /readyz names it: `<part>: <vcenter>`."""
    return f"{part}: {vcenter}"


@dataclass(frozen=True)
class ServiceSpec(Generic[C]):
    """What a service is: its name (`node-labeller`), config record and work.

    `leader_elected` services need a config record with a `lease` section
    (`LeaderElectedSettings`); only the Lease holder's work runs.

    `checks` read what the config names (a policy file, a CA bundle) as the work will, at
    `--check-config` and before the start, so a bad one fails at once and not when the Lease is
    won; `probes` reach out (vCenter's certificate) at `--check-config` only. Each raises
    `ConfigError` with one line naming the setting; a probe raises `OSError` when it cannot
    reach what it checks.

    `readiness` names, from the config, every part of /readyz the work will add: each fails
    ("not registered yet") until the work adds it, and the work may add no other.
    """

    name: str
    config_type: type[C]
    work: Callable[[ServiceContext[C]], Coroutine[Any, Any, None]]
    leader_elected: bool = False
    checks: Sequence[Callable[[C], None]] = ()
    probes: Sequence[Callable[[C], None]] = ()
    readiness: Callable[[C], Sequence[str]] = no_parts

    def __post_init__(self) -> None:
        if self.leader_elected and not issubclass(self.config_type, LeaderElectedSettings):
            raise TypeError(f"{self.config_type.__name__} has no lease section for leader election")

    @property
    def program(self) -> str:
        return f"hostaffinity-{self.name}"

    def version(self) -> str:
        return release_version(self.program)


class ServiceContext(Generic[C]):
    """What the work is given: its config, identity and connected clients."""

    def __init__(
        self,
        config: C,
        program: str,
        identity: str,
        kube: KubeClient,
        bus: Bus,
        health: HealthServer,
        group: asyncio.TaskGroup,
        cluster: ClusterIdentity,
        declared: Sequence[str] = (),
        *,
        service: str,
        ensure_leading: Callable[[], None] = no_fence,
    ) -> None:
        self.config = config
        # The spec's name (`node-labeller`): the `source` of every event the work builds with
        # `event_factory`.
        self.service = service
        self.event_factory = EventFactory(service)
        # Which Kubernetes cluster this install serves (shared.cluster.name, or read from the API).
        self.cluster = cluster
        # `hostaffinity-<service>`: the Event reporting component, the Lease's default name.
        self.program = program
        # Unique per replica: the Lease holder name, the NATS client name, the Event reporter.
        self.identity = identity
        self.kube = kube
        self.bus = bus
        self._health = health
        self._group = group
        self._declared = frozenset(declared)
        # Call right before a write only the leader may make: raises `LeaseLapsed` once this
        # replica no longer leads (a no-op in a service that is not leader-elected).
        self.ensure_leading = ensure_leading

    def add_readiness(
        self,
        name: str,
        check: ReadinessCheck,
        *,
        vcenter: str | None = None,
        detail: ReadinessDetail | None = None,
    ) -> None:
        """A named part of /readyz, declared in the spec's `readiness`; the pod is ready when
        every part passes. A part of one `vcenter` among several is degraded, not failing, while
        another vCenter's parts all pass; `detail` says why it does not pass."""
        if name not in self._declared:
            raise ValueError(f"readiness part {name!r} is not declared in the service's spec")
        self._health.add_readiness_check(name, check, unit=vcenter, detail=detail)

    def start(self, work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run `work` beside the main work; if it fails, all the work is cancelled and fails.

        A work sets up with one-shot NATS calls (a bucket, a layout, a read-back) before it
        starts its loops here; nats-py's `wait_for` may have swallowed a stop that came with one
        of their replies (Python 3.11), and the loops would then run on until the drain bound.
        So a stop already asked for is raised here, before anything starts."""
        try:
            raise_if_cancel_requested()
        except asyncio.CancelledError:
            work.close()
            raise
        return self._group.create_task(work, name=name)


class ServiceRunner(Generic[C]):
    """Runs one service's work with everything around it; `stop()` is what SIGTERM does.

    Tests run it in-process: `task = create_task(runner.run())`, then `runner.stop()`.
    """

    def __init__(self, spec: ServiceSpec[C], config: C, *, identity: str | None = None) -> None:
        self.spec = spec
        self.config = config
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.health = HealthServer(config.health.host, config.health.port)
        quiet_malformed_requests()  # for every HTTP server of the process, not only health's
        self.bus: Bus | None = None
        self.cluster: ClusterIdentity | None = None
        self.elector: LeaderElector | None = None
        # Set once /healthz, /readyz and /metrics answer (`health.port` is then the bound one).
        self.listening = asyncio.Event()
        # Set once the work has started (for a leader-elected service: once it leads).
        self.working = asyncio.Event()
        self._stopping = asyncio.Event()
        self._lost = asyncio.Event()

    def stop(self) -> None:
        """Begin a graceful stop: cancel the work, drain, release the Lease, close."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Until stopped, the work ends, or the Lease is lost (`LeadershipLost`)."""
        self.health.add_readiness_check("nats connected", lambda: self.bus is not None)
        self.health.add_readiness_check("cluster identity known", lambda: self.cluster is not None)
        if not self.spec.leader_elected:  # a standby's readiness is NATS alone
            self._declare_work_parts()
        await self.health.start()
        self.listening.set()
        try:
            async with await api_client(self.config.kubernetes) as api:
                kube = KubeClient(api, self.config.kubernetes)
                self.cluster = await self._unless_stopped(
                    read_cluster_identity(kube, self.config.shared.cluster.name)
                )
                if self.cluster is None:
                    return
                _log.info("serving cluster %s", self.cluster.describe())
                self.bus = await self._unless_stopped(
                    Bus.connect(self.config.nats, name=f"{self.spec.program}-{self.identity}")
                )
                if self.bus is None:
                    return
                self.bus.cluster = self.cluster.name
                try:
                    await self._lead_then_work(kube, self.bus, self.cluster)
                finally:
                    await self.bus.close()
        finally:
            await self.health.stop()

    async def _lead_then_work(self, kube: KubeClient, bus: Bus, cluster: ClusterIdentity) -> None:
        if not self.spec.leader_elected:
            await self._work(kube, bus, cluster)
            return
        lease = self._lease()
        self.health.add_gauge(
            "hostaffinity_leader",
            "1 while this replica holds its service's Lease and does the work, 0 while standing by",
            lambda: 1.0 if self.elector is not None and self.elector.is_leader else 0.0,
        )
        self.elector = LeaderElector(
            kube,
            namespace=lease.namespace,
            name=lease.name or self.spec.program,
            identity=self.identity,
            lease_duration_s=lease.duration_seconds,
            renew_deadline_s=lease.renew_deadline_seconds,
            retry_period_s=lease.retry_period_seconds,
            on_lost=self._lost.set,
            annotations=self._readiness_annotation,
        )
        async with self.elector as elector:
            await self._unless_stopped(elector.wait_until_leader())
            if not self.stopping:
                await self._work(kube, bus, cluster)

    def _fence(self) -> Callable[[], None]:
        """What a leader-only write asks before it is sent (nothing, if not Lease-gated)."""
        return no_fence if self.elector is None else self.elector.ensure_leading

    def _declare_work_parts(self) -> list[str]:
        parts = list(self.spec.readiness(self.config))
        for name in parts:
            self.health.declare(name)
        return parts

    def _readiness_annotation(self) -> dict[str, str]:
        """What the leader writes on its Lease at each renewal: its /readyz, part by part."""
        return {ANNOTATION_READINESS: encode_readiness(self.health.readiness().summary())}

    async def _work(self, kube: KubeClient, bus: Bus, cluster: ClusterIdentity) -> None:
        declared = self._declare_work_parts()

        async def in_group() -> None:
            async with asyncio.TaskGroup() as group:
                context = ServiceContext(
                    self.config,
                    self.spec.program,
                    self.identity,
                    kube,
                    bus,
                    self.health,
                    group,
                    cluster,
                    declared,
                    service=self.spec.name,
                    ensure_leading=self._fence(),
                )
                group.create_task(self.spec.work(context), name=f"{self.spec.name}-work")

        _log.info("%s %s working", self.spec.program, self.identity)
        self.working.set()
        work = asyncio.create_task(in_group(), name=f"{self.spec.name}-work-group")
        stop = asyncio.create_task(self._stopping.wait())
        lost = asyncio.create_task(self._lost.wait())
        try:
            await asyncio.wait({work, stop, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            lost.cancel()
            if not work.done():
                await self._cancel(work)
        if self._lost.is_set():
            raise LeadershipLost(f"{self.identity} lost the Lease; its work was cancelled")
        if not work.cancelled():
            work.result()  # raises what ended the work

    async def _cancel(self, work: asyncio.Task[None]) -> None:
        if self._lost.is_set():
            lease = self._lease()
            bound = lease.duration_seconds - lease.renew_deadline_seconds
            why = "the Lease was lost"
        else:
            bound, why = self.config.drain_seconds, "stopping"
        _log.info("%s: cancelling the work; it has %.1f s to unwind", why, bound)
        work.cancel()
        done, _ = await asyncio.wait({work}, timeout=bound)
        if not done:
            raise DrainTimeout(f"the work did not stop within {bound:.1f} s after {why}")
        if not work.cancelled() and work.exception() is not None:
            _log.error("the work failed while stopping", exc_info=work.exception())

    def _lease(self) -> LeaseSettings:
        assert isinstance(self.config, LeaderElectedSettings)  # ServiceSpec checked the type
        return self.config.lease

    async def _unless_stopped(self, step: Coroutine[Any, Any, T]) -> T | None:
        """`step`'s result, or None when a stop came first (then `step` is cancelled)."""
        task = asyncio.create_task(step)
        stop = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return None if task.cancelled() else task.result()


@contextlib.asynccontextmanager
async def running_service(
    spec: ServiceSpec[C], config: C, *, identity: str | None = None
) -> AsyncIterator[ServiceRunner[C]]:
    """The service running in this event loop, its health server listening, until the block
    ends; then stopped as SIGTERM would stop it (for tests, benchmarks, embedding)."""
    runner = ServiceRunner(spec, config, identity=identity)
    task = asyncio.create_task(runner.run(), name=spec.program)
    listening = asyncio.create_task(runner.listening.wait())
    await asyncio.wait({task, listening}, return_when=asyncio.FIRST_COMPLETED)
    listening.cancel()
    if task.done():
        task.result()  # it failed before listening: raise why
    try:
        yield runner
    finally:
        runner.stop()
        await task


SECRET_KEY_WORDS: Final = ("password", "secret", "token")
REDACTED: Final = "<redacted>"


def redact_secrets(value: Any) -> Any:
    """The config as builtins with every password-like value hidden: `--check-config` output
    ends up in terminals and CI logs, and the vCenter password is part of the config."""
    if isinstance(value, dict):
        return {
            key: REDACTED
            if item is not None and any(word in key.lower() for word in SECRET_KEY_WORDS)
            else redact_secrets(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_secrets(item) for item in value]
    return value


def run_service(spec: ServiceSpec[C], argv: Sequence[str] | None = None) -> None:
    """The console entry point: parse argv, load the config, run until stopped, exit."""
    parser = argparse.ArgumentParser(prog=spec.program, description=spec.config_type.__doc__)
    parser.add_argument(
        "--config", action="append", default=[], help="YAML file; repeat to layer files"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {spec.version()}")
    parser.add_argument(
        "--check-config", action="store_true", help="validate the config, print it and exit"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(spec.config_type, args.config)
        for check in spec.checks:
            check(config)
    except ConfigError as error:
        parser.exit(EXIT_BAD_CONFIG, f"{spec.program}: {error}\n")
    if args.check_config:
        if missing := config.nats.missing_files():
            message = f"configured files missing: {', '.join(missing)}"
            parser.exit(EXIT_BAD_CONFIG, f"{spec.program}: {message}\n")
        _probe(spec, config, parser)
        printable = redact_secrets(msgspec.to_builtins(config))
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(printable)).decode() + "\n")
        parser.exit(0)
    configure_logging(config.logging)
    sys.exit(asyncio.run(_serve_then_end(ServiceRunner(spec, config))))


async def _serve_then_end(runner: ServiceRunner[Any]) -> int:
    """`_serve`, then the tasks it left behind are cancelled; one that will not end keeps the
    process from exiting (asyncio.run waits for it), so the process ends without it."""
    code = await _serve(runner)
    stuck = await end_leftover_tasks(LEFTOVER_SECONDS)
    if stuck:
        _log.warning(
            "%d task(s) ignored cancellation for %.1f s after the stop (%s); ending the process",
            len(stuck),
            LEFTOVER_SECONDS,
            ", ".join(sorted({task.get_name() for task in stuck})),
        )
        logging.shutdown()
        os._exit(code)
    return code


async def end_leftover_tasks(within: float) -> list[asyncio.Task[Any]]:
    """Cancel every task but the caller's; those still running after `within` s. A library's
    task can swallow its cancellation (3.11's `wait_for`, nats-py's reconnect loop when the
    server went away as the service stopped) and would otherwise hold the process forever."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    if not others:
        return []
    _, pending = await asyncio.wait(others, timeout=within)
    return list(pending)


# After the stop, how long the tasks left behind get to end once cancelled.
LEFTOVER_SECONDS: Final = 5.0


def _probe(spec: ServiceSpec[C], config: C, parser: argparse.ArgumentParser) -> None:
    """Run the service's probes; the first that fails ends `--check-config` with its line."""
    for probe in spec.probes:
        try:
            probe(config)
        except ConfigError as error:
            parser.exit(EXIT_BAD_CONFIG, f"{spec.program}: {error}\n")
        except OSError as error:
            parser.exit(EXIT_FAILED, f"{spec.program}: {error}\n")


async def _serve(runner: ServiceRunner[Any]) -> int:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, runner.stop)
    telemetry = setup_telemetry(runner.spec.program)
    try:
        await runner.run()
    except LeadershipLost as lost:
        _log.error("%s; exiting so that the Deployment restarts this replica as standby", lost)
        return EXIT_LEADERSHIP_LOST
    except ClusterIdentityUnknown as unknown:
        _log.error("%s", unknown)
        return EXIT_FAILED
    except DrainTimeout as stuck:
        # The work may still be writing; nothing short of ending the process stops it.
        _log.critical("%s; ending the process", stuck)
        logging.shutdown()
        os._exit(EXIT_FAILED)
    except Exception:
        _log.exception("%s failed", runner.spec.program)
        return EXIT_FAILED
    finally:
        telemetry.shutdown()
    return 0


class _JsonLines(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the traceback, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(line).decode()


def configure_logging(settings: LoggingSettings) -> None:
    """Root logging to stderr, as text for people or JSON lines for a log pipeline."""
    handler = logging.StreamHandler()
    if settings.format == "json":
        handler.setFormatter(_JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=settings.level, handlers=[handler], force=True)
