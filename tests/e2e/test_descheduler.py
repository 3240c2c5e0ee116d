"""The descheduler end to end: the Kubernetes double, a real nats-server, and stand-ins for the
controllers around it (tests/e2e/descheduler_harness.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostaffinity.runtime.bus import Bus
from hostaffinity.schema import PodEvicted
from tests.e2e.descheduler_harness import (
    Controllers,
    ReplicaSet,
    descheduler_config,
    eventually,
    node_object,
    pod_object,
    running_descheduler,
)
from tests.e2e.labeller_harness import stream_events
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer

SPREAD_POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "profiles": [
        {
            "name": "spread",
            "pluginConfig": [
                {"name": "DefaultEvictor", "args": {}},
                {
                    "name": "RemovePodsViolatingInterPodAntiAffinity",
                    "args": {"includePreferred": True},
                },
            ],
            "plugins": {
                "deschedule": {"enabled": ["RemovePodsViolatingInterPodAntiAffinity"]},
                "balance": {"enabled": ["RemoveDuplicates"]},
            },
        }
    ],
}
PREFER_APART = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": "demo"}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    }
}


@pytest.fixture
def kubeconfig(kube_double: KubeDouble, tmp_path: Path) -> Path:
    return kube_double.write_kubeconfig(tmp_path / "kubeconfig")


def write_policy(tmp_path: Path, policy: dict[str, Any]) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    return path


def per_node(kube: KubeDouble) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in kube.store.objects("pods", "default"):
        if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            node = pod["spec"]["nodeName"]
            counts[node] = counts.get(node, 0) + 1
    return counts


async def test_seed_001_piled_replicas_spread_after_uncordon_one_at_a_time_under_a_pdb(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, tmp_path: Path
) -> None:
    kube = kube_double
    for name in ("worker-1", "worker-2", "worker-3"):
        kube.seed(node_object(name, unschedulable=name != "worker-1"))
    for i in range(5):
        kube.seed(
            pod_object(f"demo-{i}", "demo", "worker-1", owner="demo-rs", affinity=PREFER_APART)
        )
    kube.seed(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "demo"}}},
        }
    )
    controllers = Controllers(kube, [ReplicaSet("demo-rs", "demo", 5, PREFER_APART)])
    config = descheduler_config(
        nats_server, kubeconfig, write_policy(tmp_path, SPREAD_POLICY), debounce_seconds=0.5
    )
    helpers = asyncio.create_task(controllers.run())
    try:
        async with running_descheduler(config) as service:
            await eventually(
                lambda: service.loop is not None and service.loop.cycles >= 1, "first cycle"
            )
            await asyncio.sleep(1.0)
            assert controllers.evicted == []  # nowhere to go while the others are cordoned
            uncordoned = time.monotonic()
            for name in ("worker-2", "worker-3"):
                kube.write(node_object(name))
            await eventually(lambda: bool(controllers.evicted), "a first eviction", within=5)
            first = controllers.evicted[0][0] - uncordoned
            assert first < 0.5 + 1.5, f"first eviction {first:.2f}s after the uncordon"
            await eventually(
                lambda: max(per_node(kube).values(), default=0) <= 2
                and sum(per_node(kube).values()) == 5,
                "replicas spread",
                within=30,
            )
            assert service.executor is not None
            await eventually(service.executor.idle, "evictions finished", within=10)
    finally:
        helpers.cancel()
    assert len(controllers.evicted) == 3, controllers.evicted
    assert controllers.min_available == 4  # maxUnavailable 1: one replica away at a time
    bus = await Bus.connect(nats_server.settings(), name="test")
    try:
        events = [e for e in await stream_events(bus) if isinstance(e, PodEvicted)]
    finally:
        await bus.close()
    assert sorted(e.pod for e in events if e.result == "evicted") == sorted(
        f"default/{name}" for _, name in controllers.evicted
    )
    pod_events = [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "Descheduled"
    ]
    assert len(pod_events) == 3
    blocked = [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "EvictionBlocked"
    ]
    assert blocked, "the PDB never said 429: the test did not exercise the retry"
    assert all(
        "RemovePodsViolating" in e["message"] or "RemoveDuplicates" in e["message"]
        for e in pod_events
    )
