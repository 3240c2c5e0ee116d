"""A topology spread over ESXi hosts repaired end to end: vcsim, the node-labeller, a real
nats-server, the Kubernetes double and the descheduler (tests/e2e/descheduler_harness.py).

Six replicas of app=web spread over three ESXi hosts with `maxSkew: 1`, written as opted-in pods
write it (a `kubernetes.io/hostname` spread read on the host): two per host, though host H1
keeps both of its replicas on one VM (node2), so per node the spread is already uneven and only
the host reading sees it balanced. A vMotion of node2 onto H0 piles four replicas there.
The same repair under `make dev`'s policy (every strategy on) takes one eviction for one replica
too many.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.descheduler.service import DeschedulingLoop
from hostaffinity.schema import POD_PHYSICAL_ANTI_AFFINITY
from tests.e2e.descheduler_harness import (
    descheduler_config,
    eventually,
    node_object,
    pod_object,
    running_descheduler,
    terminating,
)
from tests.e2e.labeller_harness import labeller_config, relocate, running, wait_ready
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import Vcsim, VcsimFactory
from tests.recorded_fixtures import fixture_dir

SPREAD = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "web"}},
}
# vcsim puts VM i on host i mod 3: node1, node4 on H0; node2, node5 on H1; node3, node6 on H2.
NODES = [f"node{i}" for i in range(1, 7)]
REPLICAS = {"web-1": "node1", "web-2": "node2", "web-3": "node3", "web-4": "node4",
            "web-5": "node2", "web-6": "node6"}  # fmt: skip
EXCESS = 2  # H0 4, H1 0, H2 2 -> 2, 2, 2


def spread_pod(name: str, node: str) -> dict[str, Any]:
    pod = pod_object(name, "web", node, owner="web-rs", affinity=None)
    pod["metadata"]["annotations"] = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
    pod["spec"]["topologySpreadConstraints"] = [SPREAD]
    return pod


def not_descheduled(kube: KubeDouble) -> list[dict[str, Any]]:
    return [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "NotDescheduled"
    ]


@contextlib.asynccontextmanager
async def first_cycle_done(
    vc: Vcsim, nats: NatsServer, kubeconfig: Path, policy: Path
) -> AsyncIterator[DeschedulingLoop]:
    """The node-labeller and a descheduler with `policy`, from the descheduler's first cycle."""
    async with running(labeller_config(vc, nats, kubeconfig)) as labeller:
        await wait_ready(labeller)
        async with running_descheduler(descheduler_config(nats, kubeconfig, policy)) as service:
            loop = service.loop
            assert loop is not None
            await eventually(lambda: loop.cycles >= 1, "first cycle")
            yield loop


async def _evicted_in_time(kube: KubeDouble, since: float, what: str) -> float:
    """Wait for the excess to be evicted; returns the seconds it took from `since`."""
    await eventually(lambda: len(terminating(kube)) >= EXCESS, what, within=10)
    return time.monotonic() - since


@pytest.mark.parametrize("cordoned", [False, True], ids=["a-host-takes-them", "no-host-can"])
async def test_vmotion_piling_a_host_spread_evicts_exactly_the_excess(
    cordoned: bool,
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
) -> None:
    kube = kube_double
    vc = vcsim(hosts=3, vm_names=NODES)
    for name in NODES:
        kube.seed(node_object(name, unschedulable=cordoned and name == "node5"))
    for name, node in REPLICAS.items():
        kube.seed(spread_pod(name, node))
    # The upstream README's policy for the plugin, unchanged.
    policy = fixture_dir("descheduler") / "policy-topology-spread-v1alpha2.yaml"
    async with first_cycle_done(vc, nats_server, kubeconfig, policy) as loop:
        assert terminating(kube) == [], "balanced over hosts: nothing to do before the move"
        cycles = loop.cycles
        relocate(vc.connect(), "node2", "DC0_C0_H0")
        moved = time.monotonic()
        if not cordoned:
            took = await _evicted_in_time(kube, moved, "the excess evicted")
            print(f"\nspread repaired: {EXCESS} evictions {took:.3f}s after the vMotion")
            assert took < 2.0
        else:
            await eventually(lambda: loop.cycles > cycles, "a cycle after the move")
            await eventually(lambda: len(not_descheduled(kube)) >= EXCESS, "the Events")
            assert terminating(kube) == []
            message = not_descheduled(kube)[0]["message"]
            assert "RemovePodsViolatingTopologySpreadConstraint" in message
            assert "hostaffinity.io/esxi-host=DC0_C0_H0 has 4 matching pods" in message
            assert "no other node" in message
            print(f"\nno host can take them: {len(not_descheduled(kube))} NotDescheduled")
            # The uncordon gives H1 a node again: that alone starts the repair.
            kube.write(node_object("node5"), manager="kubectl")
            uncordoned = time.monotonic()
            took = await _evicted_in_time(kube, uncordoned, "the excess after uncordon")
            print(f"spread repaired: {EXCESS} evictions {took:.3f}s after the uncordon")
            assert took < 2.0
        await asyncio.sleep(1.0)  # later cycles (the evictions' own updates) add none
        assert len(terminating(kube)) == EXCESS, terminating(kube)
        for pod in terminating(kube):
            assert REPLICAS[pod] in ("node1", "node2", "node4"), "only H0 gives"


# What `make dev` runs (scripts/dev/descheduler.yaml's policy_file, relative to the repository).
DEV_POLICY = Path(__file__).resolve().parents[2] / "scripts" / "dev" / "descheduler-policy.yaml"


async def test_make_dev_repairs_a_vmotion_piling_a_host_spread_with_one_eviction(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """`make dev`'s policy, every strategy on: three replicas, one per host and each on a node of
    its own (nothing for RemoveDuplicates), until node2 moves onto H0 next to node1. One
    replica on H0 is evicted; the other strategies add nothing."""
    kube = kube_double
    vc = vcsim(hosts=3, vm_names=NODES)
    for name in NODES:
        kube.seed(node_object(name))
    replicas = {"web-1": "node1", "web-2": "node2", "web-3": "node3"}
    for name, node in replicas.items():
        kube.seed(spread_pod(name, node))
    async with first_cycle_done(vc, nats_server, kubeconfig, DEV_POLICY):
        assert terminating(kube) == [], "one replica per host and per node: nothing to do"
        relocate(vc.connect(), "node2", "DC0_C0_H0")
        moved = time.monotonic()
        await eventually(lambda: bool(terminating(kube)), "the excess evicted", within=10)
        print(f"\nmake dev's policy: spread repaired {time.monotonic() - moved:.3f}s after")
        await asyncio.sleep(1.0)  # later cycles (the eviction's own updates) add none
        (evicted,) = terminating(kube)
        assert replicas[evicted] in ("node1", "node2"), "only H0 gives"
