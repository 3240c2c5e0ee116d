"""A live migration never conflicts with its own source (issue: migrations that never deadlock).

Three anti-affine VM replicas (hostname anti-affinity on app=db, read physically by opt-in) on
three ESXi hosts with two node VMs each. Draining the node VM of one replica must end as it
does without hostaffinity: the VM live-migrates, here to the sibling node VM on its own host
(the other hosts are taken, and no two replicas then share a host). The migration target
carries its source's labels, so every host-key reading of the term -- the engine's physical
reading (the extender's and the descheduler's), and the twin the admission webhook adds for
kube-scheduler -- must leave the VM's own source pod out.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from descheduler_builders import NOW, cluster, node_json, vmi

from hostaffinity.affinity.engine import AffinityEngine, FilterMode
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Node, Pod
from hostaffinity.descheduler.cycle import decide
from hostaffinity.descheduler.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    Outcome,
    PlannerSettings,
)
from hostaffinity.descheduler.model import decode_node, decode_pod
from hostaffinity.descheduler.policy import Policy, Profile
from hostaffinity.descheduler.protections import DefaultEvictorArgs, Protections
from hostaffinity.descheduler.strategies.node_taints import NodeTaints, NodeTaintsArgs
from hostaffinity.schema.names import LABEL_ESXI_HOST
from tests.platform.kubevirt_pods import (
    HOSTNAME_KEY,
    REQUIRED,
    as_kube_scheduler_reads,
    launcher_pod_json,
    stored_after_admission,
)

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


def nodes() -> list[dict[str, Any]]:
    return [
        node_json(
            name,
            {LABEL_ESXI_HOST: host},
            unschedulable=name == DRAINED,
            taints=[CORDON_TAINT] if name == DRAINED else (),
        )
        for name, host in PLACEMENT.items()
    ]


def sources() -> list[dict[str, Any]]:
    return [launcher_pod_json(vm, node, DB, DB_APART) for vm, node in REPLICAS.items()]


def target() -> dict[str, Any]:
    return launcher_pod_json("db-0", "", DB, DB_APART, migration="drain-node-1a")


def engine(pods: list[Pod]) -> AffinityEngine:
    index = ClusterIndex()
    for item in nodes():
        index.upsert_node(msgspec.convert(item, Node))
    for name, host in PLACEMENT.items():
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
    profile = Profile("drain", Protections(DefaultEvictorArgs()), (NodeTaints(NodeTaintsArgs()),))
    policy = Policy((profile,), EvictionLimits())
    plan = decide(state, policy, EvictionPlanner(PlannerSettings(), policy.limits), NOW).plan
    assert [(a.outcome, a.vmi, a.target) for a in plan.actions] == [
        (Outcome.MIGRATE, "default/db-0", "node-1b")
    ], plan.skipped
