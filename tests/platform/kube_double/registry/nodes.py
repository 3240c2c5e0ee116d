"""Nodes: their defaults on create (the not-ready taint, a kubelet-less status of Go zero
values), and their printer columns (kubernetes pkg/printers/internalversion/printers.go,
`nodeColumnDefinitions` and `printNode`), what `kubectl get nodes` shows."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from ..tables import Column, Printer, age

_ROLE_PREFIX = "node-role.kubernetes.io/"
_ROLE_LABEL = "kubernetes.io/role"

NODE_STATUS_ZERO: dict[str, Any] = {
    "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
    "nodeInfo": {
        key: ""
        for key in (
            "machineID",
            "systemUUID",
            "bootID",
            "kernelVersion",
            "osImage",
            "containerRuntimeVersion",
            "kubeletVersion",
            "kubeProxyVersion",
            "operatingSystem",
            "architecture",
        )
    },
}


def default(node: dict[str, Any], _bound_to: dict[str, Any] | None) -> None:
    """Not ready until a kubelet (absent here) says so, with the status fields it would fill."""
    taints = node.setdefault("spec", {}).setdefault("taints", [])
    if not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    status = node.setdefault("status", {})
    for key, value in NODE_STATUS_ZERO.items():
        status.setdefault(key, copy.deepcopy(value))


def _status(node: dict[str, Any]) -> str:
    """Ready / NotReady / Unknown from the Ready condition, then SchedulingDisabled if cordoned."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    words = {"True": "Ready", "False": "NotReady"}
    shown = [words.get(ready.get("status", ""), "Unknown") if ready else "Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        shown.append("SchedulingDisabled")
    return ",".join(shown)


def _roles(node: dict[str, Any]) -> str:
    labels = node["metadata"].get("labels") or {}
    roles = {k.removeprefix(_ROLE_PREFIX) for k in labels if k.startswith(_ROLE_PREFIX)}
    if labels.get(_ROLE_LABEL):
        roles.add(labels[_ROLE_LABEL])
    roles.discard("")
    return ",".join(sorted(roles)) or "<none>"


def _address(node: dict[str, Any], kind: str) -> str:
    addresses = (node.get("status") or {}).get("addresses") or []
    return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")


def _cells(node: dict[str, Any], now: datetime) -> list[Any]:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        _status(node),
        _roles(node),
        age(node, now),
        info.get("kubeletVersion", ""),
        _address(node, "InternalIP"),
        _address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


PRINTER = Printer(
    columns=(
        Column("Name", "The node's name.", format="name"),
        Column("Status", "Ready, NotReady or Unknown; SchedulingDisabled when cordoned."),
        Column("Roles", "The node-role.kubernetes.io/<role> labels."),
        Column("Age", "Time since the node was created."),
        Column("Version", "The kubelet's version."),
        Column("Internal-IP", "The first internal address.", priority=1),
        Column("External-IP", "The first external address.", priority=1),
        Column("OS-Image", "The OS image the kubelet reports.", priority=1),
        Column("Kernel-Version", "The kernel version the kubelet reports.", priority=1),
        Column("Container-Runtime", "The container runtime and its version.", priority=1),
    ),
    cells=_cells,
)
