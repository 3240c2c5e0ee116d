"""Terse pods, placements and hosts for the drs-translator's tests, built as API JSON would be."""

import asyncio
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.core.plan import Plan, PlannerSettings
from hostaffinity.drs_translator.core.planner import asks_for_placement, plan
from hostaffinity.schema import LABEL_ESXI_HOST, EsxiHost, NodePlacement
from tests.platform.bus_values import node_placement

VCENTER = "vc"
INSTALL = "test-cluster"  # the install token every planner in these tests names rules with


def pod(
    name: str,
    node: str,
    labels: Mapping[str, str] | None = None,
    *,
    namespace: str = "default",
    apart_from: Mapping[str, str] | None = None,
    near: Mapping[str, str] | None = None,
    on_hosts: Iterable[str] = (),
    key: str = LABEL_ESXI_HOST,
    annotations: Mapping[str, str] | None = None,
    extra_term: Mapping[str, Any] | None = None,
    preferred_apart_from: Mapping[str, str] | None = None,
    preferred_near: Mapping[str, str] | None = None,
    spread: Mapping[str, Any] | None = None,
) -> Pod:
    """A pod on `node`; `apart_from`/`near` add required (anti-)affinity on `key` to pods with
    those labels; `on_hosts` adds required node affinity `In` those host label values; `spread`
    adds a topology spread on `key` (maxSkew 1, DoNotSchedule, over pods with the same labels)
    with those fields changed."""
    affinity: dict[str, Any] = {}
    if apart_from is not None:
        term = {"labelSelector": {"matchLabels": dict(apart_from)}, "topologyKey": key}
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [term | dict(extra_term or {})]
        }
    if preferred_apart_from is not None:
        term = {"labelSelector": {"matchLabels": dict(preferred_apart_from)}, "topologyKey": key}
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": term}
            ]
        }
    if near is not None:
        term = {"labelSelector": {"matchLabels": dict(near)}, "topologyKey": key}
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if preferred_near is not None:
        term = {"labelSelector": {"matchLabels": dict(preferred_near)}, "topologyKey": key}
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    hosts = list(on_hosts)
    if hosts:
        expression = {"key": LABEL_ESXI_HOST, "operator": "In", "values": hosts}
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    spec: dict[str, Any] = {"nodeName": node}
    if affinity:
        spec["affinity"] = affinity
    if spread is not None:
        written = {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": dict(labels or {})},
        }
        spec["topologySpreadConstraints"] = [written | dict(spread)]
    return msgspec.convert({"metadata": metadata, "spec": spec}, Pod)


def placement(node: str, vm: str, host: str, cluster: str = "domain-c1") -> NodePlacement:
    return node_placement(node, host, vm_moid=vm, cluster_moid=cluster, vcenter=VCENTER)


def host(
    moid: str, cluster: str = "domain-c1", *, maintenance: bool = False, entering: bool = False
) -> EsxiHost:
    return EsxiHost(
        moid=moid,
        name=moid,
        label=moid,
        cluster_moid=cluster,
        cluster_name=cluster,
        datacenter="DC0",
        connection_state="connected",
        in_maintenance_mode=maintenance,
        entering_maintenance=entering,
        vcenter=VCENTER,
    )


def topology(
    nodes: int = 6, hosts: int = 3, cluster: str = "domain-c1"
) -> tuple[dict[str, NodePlacement], dict[str, EsxiHost]]:
    """node<i> on VM vm<i>, on host h<(i-1) mod hosts> (vcsim's round robin), 1-based."""
    placements = {
        f"node{i}": placement(f"node{i}", f"vm{i}", f"h{(i - 1) % hosts}", cluster)
        for i in range(1, nodes + 1)
    }
    return placements, {f"h{i}": host(f"h{i}", cluster) for i in range(hosts)}


def run_plan(
    pods: Iterable[Pod],
    placements: Mapping[str, NodePlacement],
    hosts: Mapping[str, EsxiHost],
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    physical_anti_affinity: PhysicalAntiAffinity = "opt-in",
    existing: Mapping[str, Collection[str]] | None = None,
    **settings: Any,
) -> Plan:
    """The plan of these pods; `existing` names our rules vCenter holds, by cluster."""
    pods = list(pods)
    index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
    for name, labels in (namespaces or {"default": {}}).items():
        index.set_namespace(name, labels)
    for item in pods:
        index.upsert_pod(item)
    constrained = [item for item in pods if asks_for_placement(item)]  # as the translator keeps
    chosen = PlannerSettings(vcenter=VCENTER, install=INSTALL, **settings)
    return plan(index, placements, hosts, constrained, chosen, existing)


def held(result: Plan) -> dict[str, str]:
    """Rule name → `held_because` of every rule planned disabled for a host's maintenance."""
    return {
        name: obj.held_because
        for cluster in result.clusters.values()
        for name, obj in cluster.objects.items()
        if not obj.enabled
    }


def rules(result: Plan, kind: str = "vm-anti-affinity") -> list[tuple[str, ...]]:
    """The VM sets of the planned objects of one kind (held ones too), over all clusters,
    sorted."""
    return sorted(
        obj.vms
        for cluster in result.clusters.values()
        for obj in cluster.objects.values()
        if obj.kind == kind
    )


# The e2e shape: 6 node VMs round robin over 3 hosts in one cluster.
PLACEMENTS_6_3 = topology()


class GatedKeyValue:
    """The `hostaffinity-drs` bucket: the first put waits for its ack through
    `asyncio.wait_for`, as nats-py's `KeyValue.put` does (its request awaits the reply that
    way); the rest answer. Releasing the ack and cancelling in one loop step is the moment
    Python 3.11's `wait_for` loses the cancellation."""

    def __init__(self) -> None:
        self.ack: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiting = asyncio.Event()
        self.puts = 0

    async def put(self, key: str, value: bytes) -> int:
        self.puts += 1
        if self.puts == 1:
            self.waiting.set()
            return await asyncio.wait_for(self.ack, 5.0)
        return self.puts

    async def delete(self, key: str) -> None:
        return None
