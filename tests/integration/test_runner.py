"""The service runner against a real nats-server and the Kubernetes double: readiness from
parts, the work in a TaskGroup, SIGTERM drain, and Lease gating that cancels the work."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from hostaffinity.runtime.process.config import (
    HealthSettings,
    KubernetesSettings,
    LeaderElectedSettings,
    LeaseSettings,
)
from hostaffinity.runtime.runner import (
    DrainTimeout,
    LeadershipLost,
    ServiceContext,
    ServiceRunner,
    ServiceSpec,
)
from hostaffinity.schema import utc_timestamp
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer

LEASE = LeaseSettings(
    namespace="kube-system",
    duration_seconds=2.0,
    renew_deadline_seconds=1.5,
    retry_period_seconds=0.2,
)


class ToyConfig(LeaderElectedSettings, frozen=True):
    """A service's config: the runner's sections and its own."""

    greeting: str = "hello"


class Toy:
    """A work that records what happened to it."""

    def __init__(self, *, unwind_s: float = 0.0, fail: bool = False) -> None:
        self.started = asyncio.Event()
        self.part_ready = False
        self.unwound = False
        self._unwind_s = unwind_s
        self._fail = fail

    async def __call__(self, ctx: ServiceContext[ToyConfig]) -> None:
        assert ctx.config.greeting == "hello"
        assert ctx.bus.nc.is_connected
        ctx.add_readiness("toy part", lambda: self.part_ready)
        ctx.start(self._sibling(), name="sibling")
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(self._unwind_s)  # e.g. requests in flight finishing
            self.unwound = True

    async def _sibling(self) -> None:
        if self._fail:
            raise RuntimeError("the sibling broke")
        await asyncio.Event().wait()


def _config(nats: NatsServer, kubeconfig: Path, **overrides: object) -> ToyConfig:
    return ToyConfig(
        nats=nats.settings(),
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        lease=LEASE,
        **overrides,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def running(
    work: Toy, config: ToyConfig, identity: str, *, leader_elected: bool = True
) -> AsyncIterator[tuple[ServiceRunner[ToyConfig], asyncio.Task[None]]]:
    spec = ServiceSpec(name="toy", config_type=ToyConfig, work=work, leader_elected=leader_elected)
    runner = ServiceRunner(spec, config, identity=identity)
    task = asyncio.create_task(runner.run())
    try:
        yield runner, task
    finally:
        runner.stop()
        if not task.done():
            await asyncio.wait_for(task, 10)


async def _eventually(check: Callable[[], bool], what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _readyz(runner: ServiceRunner[ToyConfig]) -> tuple[int, str]:
    url = f"http://127.0.0.1:{runner.health.port}/readyz"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def test_readiness_is_assembled_from_parts_and_stop_drains_the_work(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    work = Toy(unwind_s=0.3)
    config = _config(nats_server, kubeconfig)
    async with running(work, config, "a", leader_elected=False) as (runner, task):
        await asyncio.wait_for(work.started.wait(), 10)
        status, text = await _readyz(runner)
        assert (status, text) == (503, "not ready: toy part\n")
        work.part_ready = True
        assert await _readyz(runner) == (200, "ready\n")
        runner.stop()
        await asyncio.wait_for(task, 5)
        assert work.unwound, "the work's finally ran before the runner returned"
        assert runner.bus is not None
        assert runner.bus.nc.is_closed


async def test_a_failing_task_ends_the_service_with_its_error(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    work = Toy(fail=True)
    async with running(work, _config(nats_server, kubeconfig), "a", leader_elected=False) as (
        _,
        task,
    ):
        with pytest.raises(ExceptionGroup) as failed:
            await asyncio.wait_for(task, 10)
        assert failed.group_contains(RuntimeError, match="the sibling broke")
        assert work.unwound


async def test_work_that_does_not_drain_in_time_is_reported(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    work = Toy(unwind_s=2.0)
    config = _config(nats_server, kubeconfig, drain_seconds=0.2)
    async with running(work, config, "a", leader_elected=False) as (runner, task):
        await asyncio.wait_for(work.started.wait(), 10)
        runner.stop()
        with pytest.raises(DrainTimeout, match=r"did not stop within 0\.2 s"):
            await asyncio.wait_for(task, 5)
        # (A process would end here; the test lets the stuck work finish instead.)
        await _eventually(lambda: work.unwound, "the slow work to unwind")


async def test_only_the_lease_holder_works_and_a_stopped_leader_hands_over(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    first, second = Toy(), Toy()
    config = _config(nats_server, kubeconfig)
    async with running(first, config, "a") as (leader, leader_task):
        await asyncio.wait_for(first.started.wait(), 10)
        async with running(second, config, "b") as (standby, _):
            await asyncio.sleep(5 * LEASE.retry_period_seconds)
            assert not second.started.is_set(), "only the Lease holder works"
            assert (await _readyz(standby))[0] == 200, "a connected standby is ready"
            leader.stop()
            await asyncio.wait_for(leader_task, 5)
            assert first.unwound
            # The Lease was released on the way out: no need to wait for it to expire.
            await asyncio.wait_for(second.started.wait(), LEASE.duration_seconds)


async def test_losing_the_lease_cancels_the_work_within_the_bound(
    nats_server: NatsServer, kubeconfig: Path, kube_double: KubeDouble
) -> None:
    work = Toy()
    config = _config(nats_server, kubeconfig)
    async with running(work, config, "a") as (_, task):
        await asyncio.wait_for(work.started.wait(), 10)
        lease = kube_double.read(
            "coordination.k8s.io/v1", "leases", "hostaffinity-toy", "kube-system"
        )
        assert lease is not None, "the Lease is named after the service"
        lease["spec"]["holderIdentity"] = "usurper"
        lease["spec"]["renewTime"] = utc_timestamp()
        kube_double.write(lease)
        usurped = time.monotonic()
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(task, LEASE.duration_seconds)
        # Noticed at the next renewal; the work was cancelled before a rival could start.
        assert time.monotonic() - usurped < LEASE.duration_seconds
        assert work.unwound


class SwallowingSetup(Toy):
    """A work whose set-up call swallows the stop, as a NATS call through Python 3.11's
    `wait_for` does when its reply and the cancellation come together; then it starts its
    loops and runs them."""

    async def __call__(self, ctx: ServiceContext[ToyConfig]) -> None:
        self.started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # the set-up call, in flight when the stop comes
        try:
            ctx.start(self._sibling(), name="sibling")
            await asyncio.Event().wait()  # the main loop
        finally:
            self.unwound = True


async def test_a_stop_swallowed_while_setting_up_ends_the_work_when_it_starts_its_loops(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    work = SwallowingSetup()
    config = _config(nats_server, kubeconfig, drain_seconds=1.0)
    async with running(work, config, "a", leader_elected=False) as (runner, task):
        await asyncio.wait_for(work.started.wait(), 10)
        runner.stop()
        await asyncio.wait_for(task, 5)  # no DrainTimeout: the work ended at once
        assert work.unwound
