"""Pods: defaulting on create, binding, eviction through their disruption budget, and graceful
deletion (kubernetes pkg/registry/core/pod/storage: BindingREST, EvictionREST; pod strategy
CheckGracefulDelete; core/v1 defaults)."""

from __future__ import annotations

import copy
import time
from typing import Any

from .. import admission, errors
from ..request import Request
from ..resources import Resource
from ..store import Store
from . import poddisruptionbudgets

_TOPOLOGY_PREFIX = "topology.kubernetes.io/"


def _pod(store: Store, request: Request) -> dict[str, Any]:
    route = request.route
    pod = store.get("pods", (route.namespace or "", route.name or ""))
    if pod is None:
        raise errors.not_found(route.resource, route.name or "")
    return pod


def bind(store: Store, request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """Bind without checking the node exists; copy its topology labels if it does."""
    route = request.route
    if (body.get("metadata") or {}).get("name") != route.name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    pod = _pod(store, request)
    node_name = (body.get("target") or {}).get("name", "")
    current = (pod.get("spec") or {}).get("nodeName")
    if current:
        raise errors.status(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{route.name}": pod {route.name} '
            f'is already assigned to node "{current}"',
            {"name": route.name, "kind": "pods/binding"},
        )
    new = copy.deepcopy(pod)
    new["spec"]["nodeName"] = node_name
    conditions = new.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": admission.now_time(),
        }
    )
    node = store.get("nodes", ("", node_name))
    if node is not None:
        copy_topology_labels(new, node)
    store.write("pods", new)
    return errors.success(201)


def evict(store: Store, request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """The Eviction API: PDB checks as policy/v1 does them, then graceful deletion."""
    route = request.route
    pod = _pod(store, request)
    dry_run = "All" in ((body.get("deleteOptions") or {}).get("dryRun") or [])
    if pod["metadata"].get("deletionTimestamp"):
        return errors.success(201)
    pdbs = poddisruptionbudgets.covering(
        store, route.namespace, pod["metadata"].get("labels") or {}
    )
    if len(pdbs) > 1:
        raise errors.status(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    if pdbs:
        poddisruptionbudgets.charge(store, pdbs[0], pod, dry_run)
    if not dry_run:
        _terminate_by_eviction(store, route.resource, pod)
    return errors.success(201)


def _terminate_by_eviction(store: Store, resource: Resource, pod: dict[str, Any]) -> None:
    """DisruptionTarget condition first (a status write), then graceful deletion."""
    marked = copy.deepcopy(pod)
    conditions = marked.setdefault("status", {}).setdefault("conditions", [])
    conditions.append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": admission.now_time(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
    )
    terminate(store, resource, store.write("pods", marked))


def terminate(store: Store, resource: Resource, pod: dict[str, Any]) -> dict[str, Any]:
    """Graceful deletion: a bound pod stays Terminating until its kubelet (absent) acts."""
    grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
    new = copy.deepcopy(pod)
    deadline = time.time() + grace
    new["metadata"]["deletionTimestamp"] = time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline)
    )
    new["metadata"]["deletionGracePeriodSeconds"] = grace
    new["metadata"]["generation"] = pod["metadata"].get("generation", 0) + 1
    return store.write(resource.storage_key, new)


def default(pod: dict[str, Any], node: dict[str, Any] | None) -> None:
    """Defaulting on create (core/v1 SetDefaults_Pod, the ServiceAccount admission's token
    volume, the QoS class), then the node's topology labels when it is bound at creation."""
    spec = pod.setdefault("spec", {})
    containers = spec.setdefault("containers", [])
    if spec.get("automountServiceAccountToken") is not False:
        volume = f"kube-api-access-{admission.random_suffix()}"
        spec.setdefault("volumes", []).append(_service_account_volume(volume))
        for container in containers:
            container.setdefault("volumeMounts", []).append(
                {
                    "name": volume,
                    "readOnly": True,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                }
            )
    for container in containers:
        image = container.get("image", "")
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("resources", {})
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    for key, value in (
        ("restartPolicy", "Always"),
        ("terminationGracePeriodSeconds", 30),
        ("dnsPolicy", "ClusterFirst"),
        ("serviceAccountName", "default"),
        ("securityContext", {}),
        ("schedulerName", "default-scheduler"),
        ("priority", 0),
        ("enableServiceLinks", True),
        ("preemptionPolicy", "PreemptLowerPriority"),
    ):
        spec.setdefault(key, value)
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    tolerations = spec.setdefault("tolerations", [])
    for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == taint for t in tolerations):
            tolerations.append(
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            )
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(containers)}
    if node is not None:
        copy_topology_labels(pod, node)


def _qos_class(containers: list[dict[str, Any]]) -> str:
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k) is not None
        and (r.get("requests") or r.get("limits") or {}).get(k) == (r.get("limits") or {}).get(k)
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _service_account_volume(name: str) -> dict[str, Any]:
    def config_map(cm: str, key: str) -> dict[str, Any]:
        return {"configMap": {"name": cm, "items": [{"key": key, "path": key}]}}

    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                config_map("kube-root-ca.crt", "ca.crt"),
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
                config_map("openshift-service-ca.crt", "service-ca.crt"),
            ],
            "defaultMode": 420,
        },
    }


def copy_topology_labels(pod: dict[str, Any], node: dict[str, Any]) -> None:
    """PodTopologyLabelsAdmission: the node's topology.kubernetes.io/* labels go onto the pod."""
    node_labels = node["metadata"].get("labels") or {}
    topology = {k: v for k, v in node_labels.items() if k.startswith(_TOPOLOGY_PREFIX)}
    if topology:
        pod["metadata"].setdefault("labels", {}).update(topology)
