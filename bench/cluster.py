"""A synthetic vSphere-backed cluster at Kubernetes' documented limits, for benchmarks.

At scale 1.0: 5,000 nodes (VMs) on 500 ESXi hosts in 3 zones, 100 namespaces, 150,000 assigned
pods (at most 110 per node). Pods belong to workloads of ~10 replicas; 1,500 of those workloads
(~15,000 pods, 10% of all pods) carry pod anti-affinity on their own `app` label: 80% on the
ESXi-host key, 10% on kubernetes.io/hostname, 10% on the zone, half required and half preferred.
5% of nodes carry a NoSchedule taint; 1% of placements disagree with the node's host label (a VM
that vMotioned before the label caught up). With `host_spread`, every pod also carries a topology
spread over ESXi hosts (maxSkew 1, DoNotSchedule, on its `app` label). Deterministic for a given
seed. The scheduler-extender benchmark builds the same cluster from here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from hostaffinity.affinity.model import (
    Affinity,
    LabelSelector,
    Namespace,
    Node,
    NodeSpec,
    ObjectMeta,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    Taint,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from hostaffinity.schema.names import LABEL_ESXI_HOST

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
FULL_NODES = 5_000
FULL_PODS = 150_000
NODES_PER_HOST = 10
MAX_PODS_PER_NODE = 110
NAMESPACES = 100
REPLICAS = 10
ANTI_AFFINITY_WORKLOADS = 1_500


@dataclass
class Workload:
    """One group of replicas, with the anti-affinity (if any) its pods carry."""

    namespace: str
    app: str
    replicas: int
    topology_key: str | None = None
    required: bool = False
    host_spread: bool = False


@dataclass
class Cluster:
    """Everything a benchmark feeds the index, plus the workloads behind the pods."""

    nodes: list[Node] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    placement: dict[str, str] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)


class ClusterSink(Protocol):
    """What an initial list feeds: the engine's index, or the extender's cache over it."""

    def upsert_namespace(self, namespace: Namespace) -> None: ...
    def upsert_node(self, node: Node) -> None: ...
    def set_placement(self, node: str, host: str | None) -> None: ...
    def upsert_pod(self, pod: Pod) -> None: ...


def feed(cluster: Cluster, sink: ClusterSink) -> None:
    """Hand every object of the cluster to `sink`, as the informers' initial lists would."""
    for namespace in cluster.namespaces:
        sink.upsert_namespace(namespace)
    for node in cluster.nodes:
        sink.upsert_node(node)
    for name, host in cluster.placement.items():
        sink.set_placement(name, host)
    for pod in cluster.pods:
        sink.upsert_pod(pod)


def _anti_affinity(workload: Workload) -> Affinity | None:
    if workload.topology_key is None:
        return None
    term = PodAffinityTerm(
        topology_key=workload.topology_key,
        label_selector=LabelSelector(match_labels={"app": workload.app}),
    )
    if workload.required:
        group = PodAffinity(required_during_scheduling_ignored_during_execution=[term])
    else:
        weighted = WeightedPodAffinityTerm(weight=100, pod_affinity_term=term)
        group = PodAffinity(preferred_during_scheduling_ignored_during_execution=[weighted])
    return Affinity(pod_anti_affinity=group)


def _host_spread(workload: Workload) -> list[TopologySpreadConstraint]:
    if not workload.host_spread:
        return []
    selector = LabelSelector(match_labels={"app": workload.app})
    return [
        TopologySpreadConstraint(
            max_skew=1,
            topology_key=LABEL_ESXI_HOST,
            when_unsatisfiable="DoNotSchedule",
            label_selector=selector,
        )
    ]


def make_pod(workload: Workload, replica: int, node: str) -> Pod:
    """One replica of a workload, assigned to `node` ("" for a pod still to be scheduled)."""
    return Pod(
        metadata=ObjectMeta(
            name=f"{workload.app}-{replica}",
            namespace=workload.namespace,
            uid=f"{workload.namespace}-{workload.app}-{replica}",
            labels={"app": workload.app, "tier": f"t{replica % 3}", "release": "stable"},
        ),
        spec=PodSpec(
            node_name=node,
            affinity=_anti_affinity(workload),
            topology_spread_constraints=_host_spread(workload),
        ),
    )


def _nodes(rng: random.Random, count: int) -> tuple[list[Node], dict[str, str]]:
    hosts = max(1, count // NODES_PER_HOST)
    nodes, placement = [], {}
    for i in range(count):
        name = f"node-{i:05d}"
        host = f"esx-{i % hosts:04d}"
        taints = [Taint(key="dedicated", value="infra", effect="NoSchedule")] if i % 20 == 0 else []
        labels = {HOSTNAME: name, ZONE: f"zone-{i % 3}", LABEL_ESXI_HOST: host}
        nodes.append(Node(metadata=ObjectMeta(name=name, labels=labels), spec=NodeSpec(taints)))
        placement[name] = f"esx-{rng.randrange(hosts):04d}" if rng.random() < 0.01 else host
    return nodes, placement


def _workloads(rng: random.Random, pods: int, anti_workloads: int) -> list[Workload]:
    workloads = []
    count = max(1, pods // REPLICAS)
    for i in range(count):
        namespace = f"ns-{rng.randrange(NAMESPACES):03d}"
        workload = Workload(namespace, f"app-{i:05d}", REPLICAS)
        if i < anti_workloads:
            roll = rng.random()
            workload.topology_key = (
                LABEL_ESXI_HOST if roll < 0.8 else HOSTNAME if roll < 0.9 else ZONE
            )
            workload.required = i % 2 == 0
        workloads.append(workload)
    return workloads


def build_cluster(scale: float = 1.0, seed: int = 1, *, host_spread: bool = False) -> Cluster:
    """The benchmark cluster at `scale` (1.0 = 5,000 nodes / 150,000 pods)."""
    rng = random.Random(seed)
    node_count = max(10, int(FULL_NODES * scale))
    pod_count = max(REPLICAS, int(FULL_PODS * scale))
    nodes, placement = _nodes(rng, node_count)
    namespaces = [
        Namespace(
            metadata=ObjectMeta(
                name=f"ns-{i:03d}",
                labels={
                    "kubernetes.io/metadata.name": f"ns-{i:03d}",
                    "team": f"team-{i % 10}",
                    "env": "prod" if i % 2 else "dev",
                },
            )
        )
        for i in range(NAMESPACES)
    ]
    workloads = _workloads(rng, pod_count, max(1, int(ANTI_AFFINITY_WORKLOADS * scale)))
    for workload in workloads:
        workload.host_spread = host_spread
    names = [n.metadata.name for n in nodes]
    load = dict.fromkeys(names, 0)
    pods = []
    for workload in workloads:
        for replica in range(workload.replicas):
            node = rng.choice(names)
            while load[node] >= MAX_PODS_PER_NODE:
                node = rng.choice(names)
            load[node] += 1
            pods.append(make_pod(workload, replica, node))
    return Cluster(nodes, namespaces, placement, pods, workloads)
