"""Terse builders for API objects in tests: they go through msgspec as real API JSON would."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Node, Pod


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> Node:
    return msgspec.convert(
        {
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"taints": list(taints), "unschedulable": unschedulable},
        },
        Node,
    )


def pod(
    name: str = "incoming",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    affinity: Mapping[str, Any] | None = None,
    tolerations: Iterable[Mapping[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spreads: Iterable[Mapping[str, Any]] = (),
) -> Pod:
    spec: dict[str, Any] = {"nodeName": node_name, "tolerations": list(tolerations)}
    spec["topologySpreadConstraints"] = list(spreads)
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    return msgspec.convert({"metadata": metadata, "spec": spec}, Pod)


def term(
    topology_key: str,
    selector: Mapping[str, Any] | None,
    **extra: Any,
) -> dict[str, Any]:
    """A PodAffinityTerm; `selector` is the labelSelector as JSON (None: absent)."""
    body: dict[str, Any] = {"topologyKey": topology_key, **extra}
    if selector is not None:
        body["labelSelector"] = dict(selector)
    return body


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    """A selector requirement as JSON."""
    return (
        {"key": key, "operator": op, "values": list(values)}
        if values
        else {
            "key": key,
            "operator": op,
        }
    )


def required(kind: str, *terms: Mapping[str, Any]) -> dict[str, Any]:
    """`{kind: {requiredDuringScheduling...: terms}}` for podAffinity / podAntiAffinity."""
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def spread(
    topology_key: str,
    selector: Mapping[str, Any] | None,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    **extra: Any,
) -> dict[str, Any]:
    """A TopologySpreadConstraint; `selector` is the labelSelector as JSON (None: absent)."""
    body: dict[str, Any] = {
        "maxSkew": max_skew,
        "topologyKey": topology_key,
        "whenUnsatisfiable": when,
        **extra,
    }
    if selector is not None:
        body["labelSelector"] = dict(selector)
    return body


def preferred(kind: str, *weighted: tuple[int, Mapping[str, Any]]) -> dict[str, Any]:
    terms = [{"weight": w, "podAffinityTerm": t} for w, t in weighted]
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": terms}}


def engine(
    nodes: Iterable[Node],
    pods: Iterable[Pod] = (),
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    placement: Mapping[str, str] | None = None,
    physical_anti_affinity: PhysicalAntiAffinity = "opt-in",
    fail_unplaced: bool = False,
) -> AffinityEngine:
    index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
    for name, labels in (namespaces or {}).items():
        index.set_namespace(name, labels)
    for item in nodes:
        index.upsert_node(item)
    for name, host in (placement or {}).items():
        index.set_placement(name, host)
    for item in pods:
        index.upsert_pod(item)
    return AffinityEngine(index, fail_unplaced=fail_unplaced)


def replica(
    name: str,
    node_name: str = "",
    *,
    owner: tuple[str, str] | None = ("ReplicaSet", "web-5d8f7"),
    labels: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    namespace: str = "shop",
    spreads: list[dict[str, Any]] | None = None,
) -> Pod:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(
            labels if labels is not None else {"app": "web", "pod-template-hash": "5d8f7"}
        ),
        "annotations": dict(annotations or {}),
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": "u",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {"nodeName": node_name, "topologySpreadConstraints": spreads or []}
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    return msgspec.convert({"metadata": metadata, "spec": spec}, Pod)
