"""A live migration never conflicts with its own source (issue: migrations that never deadlock).

Three anti-affine VM replicas (hostname anti-affinity on app=db, read physically by opt-in) on
three ESXi hosts with two node VMs each. Draining the node VM of one replica must end as it
does without hostaffinity: the VM live-migrates, here to the sibling node VM on its own host
(the other hosts are taken, and no two replicas then share a host). The migration target
carries its source's labels, so every host-key reading of the term -- the engine's physical
reading (the extender's and the descheduler's), and the twin the admission webhook adds for
kube-scheduler -- must leave the VM's own source pod out.

The same holds for a DoNotSchedule spread over hosts (maxSkew 1): four VM replicas on three
hosts, two on the drained node's host, whose third node VM is the only one with room. Without
hostaffinity the hostname spread lets the VM onto that node; counted with its source, the host
spread would refuse the VM its own host (2 + 1 - 1 > 1) and the drain would hang. With neither
the source nor the target counted, the host has 1 replica besides this VM and passes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hostaffinity.admission_webhook.core.mutation import MutationSettings
from hostaffinity.affinity.engine import AffinityEngine, FilterMode
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Node, Pod
from hostaffinity.descheduler.core.cycle import decide
from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    Outcome,
    PlannerSettings,
)
from hostaffinity.descheduler.core.model import decode_node, decode_pod
from hostaffinity.descheduler.core.policy import Policy, Profile
from hostaffinity.descheduler.core.protections import DefaultEvictorArgs, Protections
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.node_taints import NodeTaints, NodeTaintsArgs
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_SPREAD_ACROSS_HOSTS
from tests.admission_policy_cel import Policy as AdmissionPolicy
from tests.integration.webhook_harness import (
    created_pod,
    service,
    shipped_configuration,  # noqa: F401 (the fixture, used by name)
)
from tests.platform.builders.descheduler import NOW, cluster, node_json, vmi
from tests.platform.kube_double import KubeDouble
from tests.platform.kube_double.label_keys import prepare_pod_affinity
from tests.platform.kubevirt_pods import (
    HOSTNAME_KEY,
    REQUIRED,
    as_kube_scheduler_reads,
    launcher_pod_json,
    stored_after_admission,
)
from tests.platform.nats import NatsServer

HOSTS = {"esxi-1": ("node-1a", "node-1b"), "esxi-2": ("node-2a", "node-2b"),
         "esxi-3": ("node-3a", "node-3b")}  # fmt: skip
PLACEMENT = {node: host for host, nodes in HOSTS.items() for node in nodes}
REPLICAS = {"db-0": "node-1a", "db-1": "node-2a", "db-2": "node-3a"}
DRAINED = "node-1a"
DB = {"app": "db"}
DB_APART = {
    "podAntiAffinity": {
        REQUIRED: [{"labelSelector": {"matchLabels": DB}, "topologyKey": HOSTNAME_KEY}]
    }
}
# A cordon: spec.unschedulable, and the taint the node lifecycle controller adds for it.
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def nodes(
    placement: Mapping[str, str] = PLACEMENT, full: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The node VMs, DRAINED cordoned; those in `full` have room for no more VMs (a launcher
    pod asks 100m CPU)."""
    return [
        node_json(
            name,
            {LABEL_ESXI_HOST: host},
            unschedulable=name == DRAINED,
            taints=[CORDON_TAINT] if name == DRAINED else (),
            cpu="100m" if name in full else "4",
        )
        for name, host in placement.items()
    ]


def sources() -> list[dict[str, Any]]:
    return [launcher_pod_json(vm, node, DB, DB_APART) for vm, node in REPLICAS.items()]


def target() -> dict[str, Any]:
    return launcher_pod_json("db-0", "", DB, DB_APART, migration="drain-node-1a")


def engine(pods: list[Pod], placement: Mapping[str, str] = PLACEMENT) -> AffinityEngine:
    index = ClusterIndex()
    for item in nodes(placement):
        index.upsert_node(msgspec.convert(item, Node))
    for name, host in placement.items():
        index.set_placement(name, host)
    for pod in pods:
        index.upsert_pod(pod)
    return AffinityEngine(index, fail_unplaced=True)


def as_written(pod: dict[str, Any]) -> Pod:
    return msgspec.convert(pod, Pod)


def test_drain_with_replicas_equal_to_hosts_migrates_to_the_sibling_node_vm() -> None:
    # The extender's and the descheduler's reading: pods as written, hostname read physically.
    written = [as_written(p) for p in sources()]
    physical = engine(written).filter(as_written(target()), mode=FilterMode.PHYSICAL)
    assert physical.feasible == ["node-1a", "node-1b"], physical.summary()

    # kube-scheduler alone, with the webhook's host twins on every pod.
    stored = [stored_after_admission(p) for p in sources()]
    scheduler = engine([as_kube_scheduler_reads(p) for p in stored])
    placed = scheduler.filter(as_kube_scheduler_reads(stored_after_admission(target())))
    assert placed.feasible == ["node-1b"], placed.summary()

    # The drain path: the descheduler sees the cordoned node's replica and plans its live
    # migration onto the node kube-scheduler will pick.
    state = cluster(
        [decode_node(json.dumps(n)) for n in nodes()],
        [decode_pod(json.dumps(p)) for p in stored],
        placements=PLACEMENT,
        vmis=[vmi(vm, node) for vm, node in REPLICAS.items()],
    )
    assert drain_plan(state) == [(Outcome.MIGRATE, "default/db-0", "node-1b")]


def drain_plan(state: ClusterState) -> list[tuple[Outcome, str | None, str | None]]:
    """What the descheduler does about the cordoned node's VM: its live migration and target."""
    profile = Profile("drain", Protections(DefaultEvictorArgs()), (NodeTaints(NodeTaintsArgs()),))
    policy = Policy((profile,), EvictionLimits())
    plan = decide(state, policy, EvictionPlanner(PlannerSettings(), policy.limits), NOW).plan
    assert plan.actions, plan.skipped
    return [(a.outcome, a.vmi, a.target) for a in plan.actions]


SPREAD_HOSTS = {"esxi-1": ("node-1a", "node-1b", "node-1c"), "esxi-2": ("node-2a",),
                "esxi-3": ("node-3a",)}  # fmt: skip
SPREAD_PLACEMENT = {node: host for host, nodes in SPREAD_HOSTS.items() for node in nodes}
SPREAD_REPLICAS = {"db-0": "node-1a", "db-1": "node-1b", "db-2": "node-2a", "db-3": "node-3a"}
# Each node VM holding a replica has room for no other; node-1c is empty.
FULL = ("node-1b", "node-2a", "node-3a")
HOSTNAME_SPREAD = {"maxSkew": 1, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": DB}}  # fmt: skip
# The two ways a VM spreads over hosts: its hostname spread read physically (opted in), or the
# spread annotation (a hard one, by the webhook's setting).
SPREAD_WAYS = {
    "moved-hostname-spread": ((HOSTNAME_SPREAD,), {}, MutationSettings()),
    "spread-annotation": (
        (),
        {POD_SPREAD_ACROSS_HOSTS: "1"},
        MutationSettings(spread_when_unsatisfiable="DoNotSchedule"),
    ),
}


@pytest.mark.parametrize("way", list(SPREAD_WAYS))
def test_drain_under_a_host_spread_keeps_the_vm_on_its_host(way: str) -> None:
    spreads, annotations, settings = SPREAD_WAYS[way]

    def launcher(vm: str, node: str, migration: str | None = None) -> dict[str, Any]:
        return launcher_pod_json(
            vm, node, DB, {}, spreads=spreads, annotations=annotations, migration=migration
        )

    sources = [launcher(vm, node) for vm, node in SPREAD_REPLICAS.items()]
    target = launcher("db-0", "", migration="drain-node-1a")
    if spreads:
        # Without hostaffinity: the hostname spread as written lets the VM onto node-1c.
        native = engine([as_kube_scheduler_reads(p) for p in sources], SPREAD_PLACEMENT)
        assert "node-1c" in native.filter(as_kube_scheduler_reads(target)).feasible
        # The extender's and the descheduler's reading: pods as written, read physically.
        written = engine([as_written(p) for p in sources], SPREAD_PLACEMENT)
        physical = written.filter(as_written(target), mode=FilterMode.PHYSICAL)
        assert "node-1c" in physical.feasible, physical.summary()

    # kube-scheduler alone, with the webhook's host spread on every pod.
    stored = [stored_after_admission(p, settings) for p in sources]
    scheduler = engine([as_kube_scheduler_reads(p) for p in stored], SPREAD_PLACEMENT)
    placed = scheduler.filter(as_kube_scheduler_reads(stored_after_admission(target, settings)))
    assert "node-1c" in placed.feasible, placed.summary()

    # The descheduler plans the migration onto the one node with room, which kube-scheduler takes.
    state = cluster(
        [decode_node(json.dumps(n)) for n in nodes(SPREAD_PLACEMENT, FULL)],
        [decode_pod(json.dumps(p)) for p in stored],
        placements=SPREAD_PLACEMENT,
        vmis=[vmi(vm, node) for vm, node in SPREAD_REPLICAS.items()],
    )
    assert drain_plan(state) == [(Outcome.MIGRATE, "default/db-0", "node-1c")]


# Kubernetes versions the webhook supports (docs/services/admission-webhook.md): from v1.31 the
# API server merges a pod affinity term's mismatchLabelKeys into its selector; before, it drops
# the field unmerged (KEP-3633; tests/platform/kube_double/label_keys.py).
API_SERVERS = {"v1.31-and-later": True, "v1.28-to-v1.30": False}


def sibling_node_taken(stored: list[dict[str, Any]]) -> list[str]:
    """Where kube-scheduler alone may put the migration target (the last pod) among the
    others: with the source left out of its twin, the sibling node VM on its own host."""
    scheduler = engine([as_kube_scheduler_reads(p) for p in stored[:-1]])
    return scheduler.filter(as_kube_scheduler_reads(stored[-1])).feasible


@pytest.mark.usefixtures("shipped_configuration")
@pytest.mark.parametrize("merges", list(API_SERVERS.values()), ids=list(API_SERVERS))
async def test_the_webhooks_twins_leave_the_source_out_on_every_api_server(
    merges: bool, kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """The admission-webhook service, called by the double's admission path, then stored as an
    API server that does or does not merge label keys stores it: the drain with replicas =
    hosts migrates the VM to its sibling node VM either way."""
    kube_double.server.merges_label_keys = merges
    endpoints: list[str] = []
    kube_double.call_webhooks(lambda namespace, name: list(endpoints))
    async with service(nats_server, kubeconfig, kube_double) as running:
        endpoints.append(f"https://127.0.0.1:{running.webhook.port}")
        stored = [await created_pod(kube_double, "default", pod) for pod in [*sources(), target()]]
    assert all(LABEL_ESXI_HOST in json.dumps(p["spec"]["affinity"]) for p in stored), "mutated"
    assert sibling_node_taken(stored) == ["node-1b"]


@pytest.mark.parametrize("merges", list(API_SERVERS.values()), ids=list(API_SERVERS))
def test_the_admission_policys_twins_leave_the_source_out_on_every_api_server(
    merges: bool,
) -> None:
    """The same with the MutatingAdmissionPolicy (k8s/components/admission-policy) in the
    webhook's place, evaluated as tests/admission_policy_cel.py evaluates it."""
    policy = AdmissionPolicy.load()
    stored = []
    for pod in [*sources(), target()]:
        admitted = policy.admit(pod)
        prepare_pod_affinity(admitted, merges=merges)
        stored.append(admitted)
    assert policy.errors == []
    assert sibling_node_taken(stored) == ["node-1b"]
