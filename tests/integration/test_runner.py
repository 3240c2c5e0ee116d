"""The service runner against a real nats-server and the Kubernetes double: readiness from
parts (declared up front, degraded per vCenter, written on the Lease), the work in a TaskGroup,
SIGTERM drain, and Lease gating that cancels the work."""

from __future__ import annotations

import asyncio
import contextlib
import functools
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
from hostaffinity.schema import EventFactory, PodMutated, utc_timestamp
from hostaffinity.schema.names import ANNOTATION_READINESS
from hostaffinity.schema.readiness import ReadinessPart, decode_readiness
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


TOY_PART = "toy part"


class Toy:
    """A work that records what happened to it; it adds its readiness part once `register` is
    set (at once by default), and with `vcenters` a part of each vCenter's own."""

    def __init__(
        self,
        *,
        unwind_s: float = 0.0,
        fail: bool = False,
        register: asyncio.Event | None = None,
        vcenters: tuple[str, ...] = (),
    ) -> None:
        self.started = asyncio.Event()
        self.part_ready = False
        self.unwound = False
        self.event_factory: EventFactory | None = None
        self.vcenters_up = dict.fromkeys(vcenters, True)
        self._unwind_s = unwind_s
        self._fail = fail
        self._register = register

    def parts(self, _config: ToyConfig) -> list[str]:
        return [TOY_PART, *(f"vcenter connected: {name}" for name in self.vcenters_up)]

    async def __call__(self, ctx: ServiceContext[ToyConfig]) -> None:
        assert ctx.config.greeting == "hello"
        assert ctx.bus.nc.is_connected
        self.event_factory = ctx.event_factory
        self.started.set()
        if self._register is not None:
            await self._register.wait()
        ctx.add_readiness(TOY_PART, lambda: self.part_ready)
        for name in self.vcenters_up:
            ctx.add_readiness(
                f"vcenter connected: {name}",
                functools.partial(self.vcenters_up.__getitem__, name),
                vcenter=name,
                detail=lambda: "away since then: refused",
            )
        ctx.start(self._sibling(), name="sibling")
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
    spec = ServiceSpec(
        name="toy",
        config_type=ToyConfig,
        work=work,
        leader_elected=leader_elected,
        readiness=work.parts,
    )
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
        assert (status, text) == (
            503,
            "not ready: toy part\n[+] nats connected\n[+] cluster identity known\n[-] toy part\n",
        )
        work.part_ready = True
        assert await _readyz(runner) == (
            200,
            "ready\n[+] nats connected\n[+] cluster identity known\n[+] toy part\n",
        )
        runner.stop()
        await asyncio.wait_for(task, 5)
        assert work.unwound, "the work's finally ran before the runner returned"
        assert runner.bus is not None
        assert runner.bus.nc.is_closed


async def test_the_work_builds_its_events_in_the_name_of_its_spec(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    work = Toy()
    async with running(work, _config(nats_server, kubeconfig), "a", leader_elected=False):
        await asyncio.wait_for(work.started.wait(), 10)
        assert work.event_factory is not None
        event = work.event_factory.new(PodMutated, "req-1", pod="default/web-", request_uid="r")
        assert event.source == "toy"


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


async def test_readyz_is_503_until_the_work_registers_every_declared_part(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    """NATS is connected and the work runs, but has not added its part yet: not ready (the
    extender and the webhook were once ready in that moment)."""
    register = asyncio.Event()
    work = Toy(register=register)
    async with running(work, _config(nats_server, kubeconfig), "a", leader_elected=False) as (
        runner,
        _,
    ):
        await asyncio.wait_for(work.started.wait(), 10)
        status, text = await _readyz(runner)
        assert status == 503
        assert "[-] toy part: not registered yet\n" in text
        register.set()
        work.part_ready = True
        await _eventually_ready(runner)


async def test_a_part_the_spec_does_not_declare_is_refused(
    nats_server: NatsServer, kubeconfig: Path
) -> None:
    work = Toy()
    spec = ServiceSpec(name="toy", config_type=ToyConfig, work=work, leader_elected=False)
    runner = ServiceRunner(spec, _config(nats_server, kubeconfig), identity="a")
    with pytest.raises(ExceptionGroup) as failed:
        await asyncio.wait_for(runner.run(), 10)
    assert failed.group_contains(ValueError, match="'toy part' is not declared")


async def test_one_vcenter_of_two_away_is_degraded_on_readyz_metrics_and_the_lease(
    nats_server: NatsServer, kubeconfig: Path, kube_double: KubeDouble
) -> None:
    work = Toy(vcenters=("vc-a", "vc-b"))
    work.part_ready = True
    async with running(work, _config(nats_server, kubeconfig), "a") as (runner, _):
        await _eventually_ready(runner)
        work.vcenters_up["vc-b"] = False
        status, text = await _readyz(runner)
        assert status == 200
        assert text.startswith("ready, degraded: vcenter connected: vc-b\n")
        assert "[+] vcenter connected: vc-a\n" in text
        assert "[~] vcenter connected: vc-b: away since then: refused\n" in text
        metrics = await _metrics(runner)
        assert 'hostaffinity_readiness_degraded{check="vcenter connected: vc-b"} 1.0' in metrics
        assert 'hostaffinity_readiness_degraded{check="vcenter connected: vc-a"} 0.0' in metrics
        assert 'hostaffinity_readiness_check{check="vcenter connected: vc-b"} 1.0' in metrics

        # The leader writes it on its Lease at the next renewal, for `hostaffinity status`.
        degraded = ReadinessPart(
            name="vcenter connected: vc-b", state="degraded", detail="away since then: refused"
        )
        await _eventually(
            lambda: _lease_readiness(kube_double) == (True, [degraded]), "the Lease annotated"
        )

        # Both away: no vCenter is served, and that is not ready.
        work.vcenters_up["vc-a"] = False
        status, text = await _readyz(runner)
        assert status == 503
        assert text.startswith("not ready: vcenter connected: vc-a, vcenter connected: vc-b\n")
        assert "[-] vcenter connected: vc-a: away since then: refused\n" in text
        runner.stop()
    # The released Lease no longer describes a holder.
    assert _lease_readiness(kube_double) is None


async def _eventually_ready(runner: ServiceRunner[ToyConfig]) -> None:
    await asyncio.wait_for(runner.listening.wait(), 10)
    deadline = time.monotonic() + 10
    while (answer := await _readyz(runner))[0] != 200:
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.05)


async def _metrics(runner: ServiceRunner[ToyConfig]) -> str:
    url = f"http://127.0.0.1:{runner.health.port}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return await response.text()


def _lease_readiness(kube: KubeDouble) -> tuple[bool, list[ReadinessPart]] | None:
    lease = kube.read("coordination.k8s.io/v1", "leases", "hostaffinity-toy", "kube-system")
    assert lease is not None
    text = (lease["metadata"].get("annotations") or {}).get(ANNOTATION_READINESS)
    if text is None:
        return None
    written = decode_readiness(text)
    return written.ready, written.parts


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
