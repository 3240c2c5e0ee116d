"""Lease leader election against the Kubernetes API double, healthy and unhealthy: a leader
whose renewals hang, fail or crawl steps down within the renew deadline, a rival takes over only
after the lease duration, and the two never both say they lead."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.runtime.kube.leader import LeaderElector, LeaseLapsed
from hostaffinity.schema import utc_timestamp
from tests.platform.kube_double import KubeDouble

LEASE_S = 2.0


@pytest.fixture
async def client(kube_double: KubeDouble) -> AsyncIterator[KubeClient]:
    async with ApiClient(kube_double.configuration()) as api:
        yield KubeClient(api)


def _candidate(client: KubeClient, identity: str, lost: list[str] | None = None) -> LeaderElector:
    return LeaderElector(
        client,
        namespace="kube-system",
        name="hostaffinity-test",
        identity=identity,
        lease_duration_s=LEASE_S,
        renew_deadline_s=1.5,
        retry_period_s=0.2,
        on_lost=(lambda: lost.append(identity)) if lost is not None else None,
    )


async def _first_leader(a: LeaderElector, b: LeaderElector) -> tuple[LeaderElector, LeaderElector]:
    waits = {asyncio.create_task(a.wait_until_leader()), asyncio.create_task(b.wait_until_leader())}
    done, _ = await asyncio.wait(waits, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()
    assert done, "nobody became leader"
    await asyncio.sleep(3 * 0.2)  # a few more rounds: the other must not also lead
    assert a.is_leader != b.is_leader, "exactly one candidate leads"
    return (a, b) if a.is_leader else (b, a)


@pytest.mark.parametrize("release", [True, False], ids=["released", "crashed"])
async def test_exactly_one_leader_and_takeover(
    kube_double: KubeDouble, client: KubeClient, release: bool
) -> None:
    a, b = _candidate(client, "candidate-a"), _candidate(client, "candidate-b")
    a.start()
    b.start()
    try:
        leader, follower = await _first_leader(a, b)
        lease = kube_double.read(
            "coordination.k8s.io/v1", "leases", "hostaffinity-test", "kube-system"
        )
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == leader.identity
        renew = lease["spec"]["renewTime"]
        assert len(renew.split(".")[1]) == len("123456Z"), "MicroTime keeps six digits"

        stopped_at = time.monotonic()
        await leader.stop(release=release)
        await asyncio.wait_for(follower.wait_until_leader(), LEASE_S + 1.0)
        assert time.monotonic() - stopped_at <= LEASE_S + 1.0
        assert not leader.is_leader
        lease = kube_double.read(
            "coordination.k8s.io/v1", "leases", "hostaffinity-test", "kube-system"
        )
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == follower.identity
        assert lease["spec"]["leaseTransitions"] >= 1
    finally:
        await a.stop()
        await b.stop()


async def test_a_leader_held_off_the_cpu_past_its_renew_deadline_writes_nothing(
    client: KubeClient,
) -> None:
    """A process held off the CPU comes back to a write it decided while leading: before the
    renewal task gets a turn (which would step it down), `ensure_leading` already refuses."""
    elector = _candidate(client, "candidate-a")
    elector.start()
    try:
        await asyncio.wait_for(elector.wait_until_leader(), 5)
        elector.ensure_leading()
        # Blocks the loop past the 1.5 s renew deadline, as a stall would: on purpose.
        time.sleep(1.6)  # noqa: ASYNC251
        with pytest.raises(LeaseLapsed, match="candidate-a no longer leads"):
            elector.ensure_leading()
    finally:
        await elector.stop()


async def test_leader_that_loses_the_lease_is_told(
    kube_double: KubeDouble, client: KubeClient
) -> None:
    lost: list[str] = []
    async with _candidate(client, "candidate-a", lost) as elector:
        await asyncio.wait_for(elector.wait_until_leader(), 5)
        lease = kube_double.read(
            "coordination.k8s.io/v1", "leases", "hostaffinity-test", "kube-system"
        )
        assert lease is not None
        lease["spec"]["holderIdentity"] = "usurper"
        lease["spec"]["renewTime"] = utc_timestamp()
        kube_double.write(lease)
        for _ in range(60):
            if not elector.is_leader:
                break
            await asyncio.sleep(0.05)
        assert lost == ["candidate-a"]


FAULT_LEASE_S = 3.0
FAULT_RENEW_S = 1.5
# Time for the event loop to act on a deadline on a busy machine; well below the gap between the
# renew deadline and the lease duration, which is what keeps two leaders apart.
LOOP_SLACK_S = 0.5


class LeaderSampler:
    """Samples both candidates' `is_leader` every 10 ms, as a watchdog would."""

    def __init__(self, a: LeaderElector, b: LeaderElector) -> None:
        self.both = 0
        self.first_lead: dict[str, float] = {}
        self._pair = (a, b)
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            leading = [e for e in self._pair if e.is_leader]
            self.both += len(leading) == 2
            for elector in leading:
                self.first_lead.setdefault(elector.identity, time.monotonic())
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.mark.parametrize("fault_kind", ["hung", "failing", "slow"])
async def test_a_leader_whose_api_is_unhealthy_steps_down_before_a_rival_takes_over(
    kube_double: KubeDouble, client: KubeClient, fault_kind: str
) -> None:
    lost_at: dict[str, float] = {}

    def candidate(identity: str) -> LeaderElector:
        return LeaderElector(
            client,
            namespace="kube-system",
            name="hostaffinity-test",
            identity=identity,
            lease_duration_s=FAULT_LEASE_S,
            renew_deadline_s=FAULT_RENEW_S,
            retry_period_s=0.2,
            on_lost=lambda: lost_at.setdefault(identity, time.monotonic()) and None,
        )

    a, b = candidate("candidate-a"), candidate("candidate-b")
    a.start()
    b.start()
    try:
        leader, follower = await _first_leader(a, b)
        sampler = LeaderSampler(a, b)
        fault = kube_double.fault("leases", "hostaffinity-test", "kube-system")
        if fault_kind == "hung":
            fault.hold()
        elif fault_kind == "failing":
            fault.failing = True
        else:
            fault.delay_s = 1.5 * FAULT_RENEW_S  # every call outlives the renew deadline
        faulted_at = time.monotonic()
        await _eventually_true(lambda: leader.identity in lost_at, within=FAULT_LEASE_S)
        # The last renewal that succeeded was sent before the fault began.
        assert leader.renewed_at <= faulted_at
        stepped_down_after = lost_at[leader.identity] - leader.renewed_at
        assert stepped_down_after <= FAULT_RENEW_S + LOOP_SLACK_S
        assert stepped_down_after < FAULT_LEASE_S
        assert not leader.is_leader
        assert not follower.is_leader, "nobody can take an unreachable Lease"

        await asyncio.sleep(FAULT_LEASE_S + 1.0 - (time.monotonic() - faulted_at))
        fault.clear()  # the API recovers; the held or slow calls are still carried out
        await asyncio.wait_for(follower.wait_until_leader(), FAULT_LEASE_S * 3)
        await asyncio.sleep(0.2)  # a few more samples
        await sampler.close()
        assert sampler.first_lead[follower.identity] >= leader.renewed_at + FAULT_LEASE_S
        assert sampler.both == 0, "the two candidates both said they lead"
        assert list(lost_at) == [leader.identity]
    finally:
        await a.stop()
        await b.stop()


async def _eventually_true(check: Callable[[], bool], within: float) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_leader_whose_api_is_back_before_the_renew_deadline_keeps_leading(
    kube_double: KubeDouble, client: KubeClient
) -> None:
    """Killed right after a renewal and back 0.3 s before the renew deadline, i.e. between two
    retry periods: a renewal still gets in, since only the deadline decides leadership."""
    lost: list[str] = []
    leader = LeaderElector(
        client,
        namespace="kube-system",
        name="hostaffinity-test",
        identity="candidate-a",
        lease_duration_s=3.0,
        renew_deadline_s=2.0,
        retry_period_s=0.8,
        on_lost=lambda: lost.append("candidate-a"),
    )
    leader.start()
    try:
        await asyncio.wait_for(leader.wait_until_leader(), 5)
        renewed = leader.renewed_at
        await _eventually_true(lambda: leader.renewed_at != renewed, within=2.0)
        await kube_double.kill()
        killed_at = time.monotonic()
        leading = []
        while time.monotonic() - killed_at < 1.7:
            leading.append(leader.is_leader)
            await asyncio.sleep(0.01)
        await kube_double.revive()
        await _eventually_true(lambda: leader.renewed_at > killed_at, within=1.0)
        assert all(leading)
        assert leader.is_leader
        assert lost == []
    finally:
        await leader.stop()
