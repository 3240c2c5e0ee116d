"""Pods, nodes and VMIs as the API server returns them (JSON), for the descheduler's tests.

Objects are built as API JSON and decoded the way the informers decode them, so tests exercise
the real field names (camelCase, ownerReferences, status.allocatable, ...).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace, ObjectMeta
from hostaffinity.descheduler.core.cycle import decide
from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    Plan,
    PlannerSettings,
)
from hostaffinity.descheduler.core.kubevirt import (
    VirtualMachine,
    VirtualMachineInstance,
    decode_vm,
    decode_vmi,
)
from hostaffinity.descheduler.core.model import (
    DeschedulerNode,
    DeschedulerPod,
    decode_node,
    decode_pod,
)
from hostaffinity.descheduler.core.policy import Policy, Profile
from hostaffinity.descheduler.core.protections import DefaultEvictorArgs, Protections
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import Strategy

HOSTNAME = "kubernetes.io/hostname"
ESXI = "hostaffinity.io/esxi-host"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def stamp(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_json(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    taints: Iterable[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool = True,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node(name: str, labels: Mapping[str, str] | None = None, **kwargs: Any) -> DeschedulerNode:
    return decode_node(json.dumps(node_json(name, labels, **kwargs)))


def anti_affinity(
    selector: Mapping[str, str], key: str = HOSTNAME, *, preferred: bool = False
) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": key}
    if preferred:
        group = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    else:
        group = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    return {"podAntiAffinity": group}


def pod_json(
    name: str,
    node_name: str,
    labels: Mapping[str, str] | None = None,
    *,
    namespace: str = "default",
    owner: tuple[str, str] | None = ("ReplicaSet", "web-rs"),
    affinity: Mapping[str, Any] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Mapping[str, str]] = (),
    priority: int | None = None,
    created_minutes_ago: float = 60,
    annotations: Mapping[str, str] | None = None,
    volumes: Iterable[Mapping[str, Any]] = (),
    cpu: str = "100m",
    memory: str = "128Mi",
    deleting: bool = False,
    phase: str = "Running",
    topology_spread: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
        "creationTimestamp": stamp(created_minutes_ago),
    }
    if owner is not None:
        kind, owner_name = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = stamp(-1)
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "tolerations": list(tolerations),
        "volumes": list(volumes),
    }
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if priority is not None:
        spec["priority"] = priority
    if topology_spread:
        spec["topologySpreadConstraints"] = [dict(c) for c in topology_spread]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def spread(
    key: str,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    selector: Mapping[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A topologySpreadConstraint as written in a pod spec (selector app=web by default)."""
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": dict(selector or {"app": "web"})},
        **fields,
    }


def pod(
    name: str, node_name: str, labels: Mapping[str, str] | None = None, **kwargs: Any
) -> DeschedulerPod:
    return decode_pod(json.dumps(pod_json(name, node_name, labels, **kwargs)))


def vmi_json(
    name: str,
    node_name: str,
    *,
    strategy: str | None = "LiveMigrate",
    migratable: bool = True,
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A running VMI; `owner` (kind, name): its controller (VirtualMachine or VMIRS)."""
    spec: dict[str, Any] = {
        "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}
    }
    if strategy is not None:
        spec["evictionStrategy"] = strategy
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-vmi-{name}",
            "annotations": dict(annotations or {}),
            "ownerReferences": [_kubevirt_owner(*owner)] if owner else [],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "nodeName": node_name,
            "conditions": [
                {
                    "type": "LiveMigratable",
                    "status": "True" if migratable else "False",
                    "message": "" if migratable else "cannot migrate VMI with non-shared PVCs",
                }
            ],
        },
    }


def _kubevirt_owner(kind: str, name: str) -> dict[str, Any]:
    group = "pool.kubevirt.io/v1beta1" if kind == "VirtualMachinePool" else "kubevirt.io/v1"
    return {"apiVersion": group, "kind": kind, "name": name, "uid": f"uid-{name}",
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def vm_json(
    name: str,
    pool: str | None = None,
    *,
    template_affinity: Mapping[str, Any] | None = None,
    restart_required: bool = False,
) -> dict[str, Any]:
    """A VirtualMachine, in a pool or not, its template's affinity, and KubeVirt's
    RestartRequired condition when a template change waits for a restart."""
    owners = [_kubevirt_owner("VirtualMachinePool", pool)] if pool else []
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}", "ownerReferences": owners}
    template: dict[str, Any] = {"domain": {"devices": {}}}
    if template_affinity is not None:
        template["affinity"] = dict(template_affinity)
    conditions = [{"type": "RestartRequired", "status": "True"}] if restart_required else []
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": meta,
        "spec": {"runStrategy": "Always", "template": {"spec": template}},
        "status": {"conditions": conditions},
    }


def vm(name: str, pool: str | None = None, **kwargs: Any) -> VirtualMachine:
    return decode_vm(json.dumps(vm_json(name, pool, **kwargs)))


def kubevirt_json(
    version: str, per_cluster: int | None = None, outbound_per_node: int | None = None
) -> dict[str, Any]:
    """The KubeVirt CR virt-operator reconciles: its migration limits and the version it runs."""
    migrations: dict[str, int] = {}
    if per_cluster is not None:
        migrations["parallelMigrationsPerCluster"] = per_cluster
    if outbound_per_node is not None:
        migrations["parallelOutboundMigrationsPerNode"] = outbound_per_node
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt", "uid": "uid-kubevirt"},
        "spec": {"configuration": {"migrations": migrations}},
        "status": {"phase": "Deployed", "observedKubeVirtVersion": version},
    }


def vmi(name: str, node_name: str, **kwargs: Any) -> VirtualMachineInstance:
    return decode_vmi(json.dumps(vmi_json(name, node_name, **kwargs)))


def launcher(
    vmi_name: str, node_name: str, labels: Mapping[str, str] | None = None, **kwargs: Any
) -> DeschedulerPod:
    """The virt-launcher pod of a VMI."""
    return pod(
        f"virt-launcher-{vmi_name}-abcde",
        node_name,
        {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": vmi_name, **(labels or {})},
        owner=("VirtualMachineInstance", vmi_name),
        **kwargs,
    )


def cluster(
    nodes: Iterable[DeschedulerNode],
    pods: Iterable[DeschedulerPod] = (),
    *,
    placements: Mapping[str, str] | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    vmis: Iterable[VirtualMachineInstance] = (),
    vms: Iterable[VirtualMachine] = (),
    physical_anti_affinity: PhysicalAntiAffinity = "opt-in",
) -> ClusterState:
    state = ClusterState(physical_anti_affinity=physical_anti_affinity)
    for name, labels in (namespaces or {"default": {}}).items():
        state.upsert_namespace(Namespace(metadata=ObjectMeta(name=name, labels=dict(labels))))
    for item in nodes:
        state.upsert_node(item)
    for name, host in (placements or {}).items():
        state.set_placement(name, host)
    for item in pods:
        state.upsert_pod(item)
    for item in vmis:
        state.upsert_vmi(item)
    for machine in vms:
        state.upsert_vm(machine)
    return state


def decide_once(
    state: ClusterState,
    *strategies: Strategy,
    evictor_args: DefaultEvictorArgs | None = None,
    limits: EvictionLimits | None = None,
    settings: PlannerSettings | None = None,
    planner: EvictionPlanner | None = None,
) -> Plan:
    """One cycle of the given strategies under one profile."""
    profile = Profile("test", Protections(evictor_args or DefaultEvictorArgs()), strategies)
    policy = Policy((profile,), limits or EvictionLimits())
    planner = planner or EvictionPlanner(settings or PlannerSettings(), policy.limits)
    return decide(state, policy, planner, NOW).plan


def evicted(plan: Plan) -> list[str]:
    return [action.pod for action in plan.actions]
