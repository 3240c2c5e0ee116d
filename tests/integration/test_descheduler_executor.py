"""The descheduler's executor against the Kubernetes double: the Eviction API's answers (201,
429 from a PodDisruptionBudget, 404), dry-run, and idempotent migrations."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.descheduler.config import ExecutorSettings
from hostaffinity.descheduler.core.eviction_planner import (
    Action,
    EvictionLimits,
    EvictionPlanner,
    Outcome,
    Plan,
    PlannerSettings,
    VmiStays,
)
from hostaffinity.descheduler.core.model import decode_pod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.executor import Executor, migration_name
from hostaffinity.runtime.kube.client import KubeClient, api_client
from hostaffinity.runtime.kube.leader import LeaseLapsed, no_fence
from hostaffinity.runtime.process.config import KubernetesSettings
from tests.e2e.descheduler_harness import eventually
from tests.platform.builders.descheduler import cluster, launcher, node, pod, pod_json
from tests.platform.kube_double import KubeDouble


@pytest.fixture
async def kube(kube_double: KubeDouble, tmp_path: Path) -> AsyncIterator[KubeClient]:
    settings = KubernetesSettings(kubeconfig=str(kube_double.write_kubeconfig(tmp_path / "kc")))
    async with await api_client(settings) as api:
        yield KubeClient(api, settings)


def action(
    state: ClusterState, key: str, outcome: Outcome = Outcome.EVICT, vmi: str = ""
) -> Action:
    p = state.pods[key]
    return Action(
        outcome=outcome,
        pod=key,
        uid=p.metadata.uid,
        namespace=p.metadata.namespace,
        node=p.spec.node_name,
        workload="default/ReplicaSet/web-rs",
        strategy="RemovePodsViolatingNodeTaints",
        rule="taint",
        why="",
        target="n2",
        vmi=vmi,
    )


class Recorder:
    def __init__(self) -> None:
        self.results: list[tuple[str, str]] = []
        self.pokes: list[str] = []
        self.intended: list[str] = []
        self.bus_takes_intents = True

    async def report(self, done: Action, result: str) -> None:
        self.results.append((done.pod, result))

    async def stay(self, _stay: VmiStays) -> None:
        return None

    def poke(self, reason: str) -> None:
        self.pokes.append(reason)

    async def intend(self, action: Action) -> bool:
        self.intended.append(action.pod)
        return self.bus_takes_intents


async def run(
    kube: KubeClient,
    state: ClusterState,
    plan: Plan,
    recorder: Recorder,
    until: int,
    planner: EvictionPlanner | None = None,
    ensure_leading: Callable[[], None] = no_fence,
) -> EvictionPlanner:
    planner = planner or EvictionPlanner(PlannerSettings(), EvictionLimits())
    settings = ExecutorSettings(retry_initial_seconds=0.05, retry_max_seconds=0.2)
    executor = Executor(
        kube,
        state,
        planner,
        settings,
        recorder.intend,
        recorder.report,
        recorder.stay,
        recorder.poke,
        ensure_leading=ensure_leading,
    )
    task = asyncio.create_task(executor.run())
    try:
        await executor.submit(plan)
        await eventually(lambda: len(recorder.results) >= until, f"{until} results", within=10)
        await eventually(executor.idle, "executor idle")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return planner


def seed_pod(kube_double: KubeDouble, name: str, node_name: str = "n1") -> None:
    kube_double.seed(pod_json(name, node_name, {"app": "web"}))


async def test_no_eviction_leaves_a_replica_that_stopped_leading(
    kube_double: KubeDouble, kube: KubeClient
) -> None:
    """A plan decided while leading, carried out after the Lease lapsed (a process held off the
    CPU, as the hour's soak saw): the intent is stored, the Eviction is never sent, and nothing
    is reported (the next leader withdraws the intent)."""
    seed_pod(kube_double, "web-0")
    state = cluster([node("n1"), node("n2")], [pod("web-0", "n1", {"app": "web"})])
    recorder = Recorder()

    def lapsed() -> None:
        raise LeaseLapsed("replica-a no longer leads hostaffinity-descheduler")

    plan = Plan(actions=[action(state, "default/web-0")])
    planner = await run(kube, state, plan, recorder, until=0, ensure_leading=lapsed)
    assert recorder.intended == ["default/web-0"]
    assert recorder.results == []
    stored = kube_double.read("v1", "pods", "web-0", "default")
    assert stored is not None
    assert "deletionTimestamp" not in stored["metadata"]
    assert planner.in_progress == {}
    assert not planner.cooling("default/ReplicaSet/web-rs")


async def test_evicted_blocked_and_gone_then_the_blocked_one_decided_again(
    kube_double: KubeDouble, kube: KubeClient
) -> None:
    seed_pod(kube_double, "free")
    seed_pod(kube_double, "guarded")
    kube_double.seed(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "pdb", "namespace": "default", "generation": 1},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": 1,
                "currentHealthy": 2,
                "desiredHealthy": 1,
                "expectedPods": 2,
            },
        }
    )
    state = cluster(
        [node("n1"), node("n2")],
        [
            pod("free", "n1", {"app": "web"}),
            pod("guarded", "n1", {"app": "web"}),
            pod("ghost", "n1", {"app": "web"}),
        ],
    )
    plan = Plan(
        actions=[action(state, k) for k in ("default/free", "default/guarded", "default/ghost")]
    )
    recorder = Recorder()
    planner = await run(kube, state, plan, recorder, until=3)
    outcomes = dict(recorder.results)
    assert outcomes["default/ghost"] == "gone"
    assert sorted(outcomes[k] for k in ("default/free", "default/guarded")) == [
        "blocked",
        "evicted",
    ]
    [blocked] = [k for k, r in recorder.results if r == "blocked"]
    # Not retried blindly: the pod waits for a cycle to decide about it again.
    assert list(planner.retrying) == [blocked]
    assert planner.retrying[blocked].attempts == 1
    await eventually(lambda: len(recorder.pokes) == 1, "a cycle asked for after the backoff")
    assert blocked in recorder.pokes[0]
    assert planner.in_progress == {}
    assert planner.cooling("default/ReplicaSet/web-rs")

    # The disruption controller's view once the first eviction's replacement is Ready.
    stored = kube_double.read("policy/v1", "poddisruptionbudgets", "pdb", "default")
    assert stored is not None
    stored["status"]["disruptionsAllowed"] = 1
    kube_double.write(stored)
    again = Recorder()
    await run(kube, state, Plan(actions=[action(state, blocked)]), again, until=1, planner=planner)
    assert again.results == [(blocked, "evicted")]
    assert planner.retrying == {}
    for name in ("free", "guarded"):
        stored_pod = kube_double.read("v1", "pods", name, "default")
        assert stored_pod is not None
        assert stored_pod["metadata"].get("deletionTimestamp")


async def test_dry_run_calls_nothing(kube_double: KubeDouble, kube: KubeClient) -> None:
    seed_pod(kube_double, "p")
    state = cluster([node("n1"), node("n2")], [pod("p", "n1", {"app": "web"})])
    recorder = Recorder()
    await run(kube, state, Plan(actions=[action(state, "default/p")], dry_run=True), recorder, 1)
    assert recorder.results == [("default/p", "dry-run")]
    stored = kube_double.read("v1", "pods", "p", "default")
    assert stored is not None
    assert not stored["metadata"].get("deletionTimestamp")


async def test_no_eviction_without_its_intent_stored(
    kube_double: KubeDouble, kube: KubeClient
) -> None:
    """NATS does not take the intent: the pod is not touched, and decided again later."""
    seed_pod(kube_double, "p")
    state = cluster([node("n1"), node("n2")], [pod("p", "n1", {"app": "web"})])
    recorder = Recorder()
    recorder.bus_takes_intents = False
    planner = await run(kube, state, Plan(actions=[action(state, "default/p")]), recorder, 1)
    assert recorder.results == [("default/p", "unreachable")]
    assert list(planner.retrying) == ["default/p"]
    stored = kube_double.read("v1", "pods", "p", "default")
    assert stored is not None
    assert not stored["metadata"].get("deletionTimestamp")


async def test_a_replaced_pod_is_not_evicted(kube_double: KubeDouble, kube: KubeClient) -> None:
    seed_pod(kube_double, "p")
    state = cluster([node("n1"), node("n2")], [pod("p", "n1", {"app": "web"})])
    stale = action(state, "default/p")
    # The pod was deleted and created again under the same name: a new uid.
    body = pod_json("p", "n1", {"app": "web"})
    body["metadata"]["uid"] = "a-new-uid"
    state.upsert_pod(decode_pod(json.dumps(body)))
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    recorder = Recorder()
    executor = Executor(
        kube,
        state,
        planner,
        ExecutorSettings(),
        recorder.intend,
        recorder.report,
        recorder.stay,
        recorder.poke,
    )
    task = asyncio.create_task(executor.run())
    try:
        await executor.submit(Plan(actions=[stale]))
        await eventually(executor.idle, "executor idle")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert recorder.results == []
    stored = kube_double.read("v1", "pods", "p", "default")
    assert stored is not None
    assert not stored["metadata"].get("deletionTimestamp")


async def test_a_migration_is_created_once(kube_double: KubeDouble, kube: KubeClient) -> None:
    launcher_pod = launcher("vm-a", "n1")
    state = cluster([node("n1"), node("n2")], [launcher_pod])
    move = action(state, launcher_pod.key, Outcome.MIGRATE, vmi="default/vm-a")
    recorder = Recorder()
    await run(kube, state, Plan(actions=[move, move]), recorder, until=2)
    assert [r for _, r in recorder.results] == ["migrated", "migrated"]
    migrations: list[dict[str, Any]] = kube_double.store.objects(
        "virtualmachineinstancemigrations.kubevirt.io", "default"
    )
    assert [m["metadata"]["name"] for m in migrations] == [
        migration_name("vm-a", launcher_pod.metadata.uid)
    ]
    assert migrations[0]["spec"] == {"vmiName": "vm-a"}


async def test_an_unreachable_api_is_decided_again_after_the_backoff(
    kube_double: KubeDouble, kube: KubeClient
) -> None:
    """A killed API server (connections refused) decided nothing: the pod is not given up but
    waits for a cycle to decide about it again, as a PodDisruptionBudget's refusal does."""
    seed_pod(kube_double, "p")
    state = cluster([node("n1"), node("n2")], [pod("p", "n1", {"app": "web"})])
    recorder = Recorder()
    await kube_double.kill()
    try:
        planner = await run(kube, state, Plan(actions=[action(state, "default/p")]), recorder, 1)
    finally:
        await kube_double.revive()
    assert recorder.results == [("default/p", "unreachable")]
    assert list(planner.retrying) == ["default/p"]
    await eventually(lambda: len(recorder.pokes) == 1, "a cycle asked for after the backoff")
    assert not planner.cooling("default/ReplicaSet/web-rs")

    again = Recorder()
    await run(kube, state, Plan(actions=[action(state, "default/p")]), again, 1, planner=planner)
    assert again.results == [("default/p", "evicted")]
