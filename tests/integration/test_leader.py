"""Lease leader election against the Kubernetes API double."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from hostaffinity.runtime.kube import KubeClient
from hostaffinity.runtime.leader import LeaderElector, micro_time
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
    done, _ = await asyncio.wait(
        {asyncio.create_task(a.wait_until_leader()), asyncio.create_task(b.wait_until_leader())},
        timeout=5,
        return_when=asyncio.FIRST_COMPLETED,
    )
    assert done, "nobody became leader"
    for task in done:
        task.cancel()
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
        lease["spec"]["renewTime"] = micro_time()
        kube_double.write(lease)
        for _ in range(60):
            if not elector.is_leader:
                break
            await asyncio.sleep(0.05)
        assert lost == ["candidate-a"]


def test_micro_time_always_has_six_digits() -> None:
    from datetime import UTC, datetime

    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"
