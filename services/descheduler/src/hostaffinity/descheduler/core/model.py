"""The API shapes the descheduler reads beyond what the affinity engine needs.

`DeschedulerPod` and `DeschedulerNode` subclass the engine's `Pod` and `Node`, so one decode from
the raw JSON serves both the engine (which reads only its fields) and the planner (priority,
owners, volumes, requests, age, allocatable, readiness). Quantities follow
k8s.io/apimachinery/pkg/api/resource (v1.36): decimal and binary suffixes, `m` for milli.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

import msgspec

from hostaffinity.affinity.model import (
    SHARED_POD_META,
    SHARED_POD_SPEC,
    LabelSelector,
    Node,
    NodeSpec,
    ObjectMeta,
    Pod,
    PodSpec,
    PodStatus,
)
from hostaffinity.affinity.model import ApiStruct as _ApiStruct
from hostaffinity.affinity.sharing import with_shared_parts


class ResourceRequirements(_ApiStruct, frozen=True):
    requests: dict[str, str] | None = None


class Container(_ApiStruct, frozen=True):
    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)


class Volume(_ApiStruct, frozen=True):
    name: str = ""
    empty_dir: dict[str, object] | None = None
    host_path: dict[str, object] | None = None
    persistent_volume_claim: dict[str, object] | None = None


class PodMeta(ObjectMeta, frozen=True):
    creation_timestamp: str = ""
    deletion_timestamp: str | None = None


class DeschedulerPodSpec(PodSpec, frozen=True):
    priority: int | None = None
    priority_class_name: str = ""
    containers: list[Container] = msgspec.field(default_factory=list)
    init_containers: list[Container] = msgspec.field(default_factory=list)
    volumes: list[Volume] = msgspec.field(default_factory=list)
    overhead: dict[str, str] | None = None


class DeschedulerPod(Pod, frozen=True):
    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: DeschedulerPodSpec = msgspec.field(default_factory=DeschedulerPodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class NodeCondition(_ApiStruct, frozen=True):
    type: str = ""
    status: str = ""


class NodeStatus(_ApiStruct, frozen=True):
    allocatable: dict[str, str] = msgspec.field(default_factory=dict)
    conditions: list[NodeCondition] = msgspec.field(default_factory=list)


class DeschedulerNode(Node, frozen=True):
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)

    @property
    def ready(self) -> bool:
        """The node's Ready condition is True (a node with no conditions yet is not ready)."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)


class PdbSpec(_ApiStruct, frozen=True):
    selector: LabelSelector | None = None


class PdbStatus(_ApiStruct, frozen=True):
    disruptions_allowed: int = 0


class PodDisruptionBudget(_ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PdbSpec = msgspec.field(default_factory=PdbSpec)
    status: PdbStatus = msgspec.field(default_factory=PdbStatus)


_POD: Final = msgspec.json.Decoder(DeschedulerPod)
_NODE: Final = msgspec.json.Decoder(DeschedulerNode)
_PDB: Final = msgspec.json.Decoder(PodDisruptionBudget)


# What a workload's replicas repeat: the state holds every pod, so these are held once (the
# engine's fields, and the descheduler's own).
_SHARED_META: Final = (*SHARED_POD_META, "creation_timestamp")
_SHARED_SPEC: Final = (
    *SHARED_POD_SPEC,
    "priority_class_name",
    "containers",
    "init_containers",
    "volumes",
    "overhead",
)


def decode_pod(data: bytes | str) -> DeschedulerPod:
    """Decode one Pod, sharing what it repeats from its replicas (sharing.with_shared_fields)."""
    return with_shared_parts(_POD.decode(data), _SHARED_META, _SHARED_SPEC)


def decode_node(data: bytes | str) -> DeschedulerNode:
    return _NODE.decode(data)


def decode_pdb(data: bytes | str) -> PodDisruptionBudget:
    return _PDB.decode(data)


# -- quantities ---------------------------------------------------------------------------------

_SUFFIXES: Final = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+))?(m|[kMGTPE]i?|)$")


def quantity_milli(text: str) -> int:
    """A quantity in thousandths (`250m` -> 250, `1` -> 1000, `128Mi` -> 134217728000).

    Raises ValueError for text the API server would not accept.
    """
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = match.groups()
    value = float(number) * (10 ** int(exponent) if exponent else 1)
    if suffix == "m":
        return round(value)
    return round(value * _SUFFIXES[suffix] * 1000)


# -- facts the eviction planner reads ------------------------------------------------------------

Resources = dict[str, int]  # resource name -> thousandths


def _add_requests(into: Resources, requests: dict[str, str] | None) -> None:
    for name, text in (requests or {}).items():
        into[name] = into.get(name, 0) + quantity_milli(text)


def pod_requests(pod: DeschedulerPod) -> Resources:
    """What the scheduler reserves for the pod: containers summed, the largest init container
    if larger, plus overhead (pkg/api/v1/resource/helpers.go PodRequests), plus one pod slot."""
    total: Resources = {}
    for container in pod.spec.containers:
        _add_requests(total, container.resources.requests)
    for init in pod.spec.init_containers:
        single: Resources = {}
        _add_requests(single, init.resources.requests)
        for name, value in single.items():
            total[name] = max(total.get(name, 0), value)
    _add_requests(total, pod.spec.overhead)
    total["pods"] = 1000
    return total


def node_allocatable(node: DeschedulerNode) -> Resources:
    """The node's allocatable resources in thousandths (unparseable values are left out)."""
    result: Resources = {}
    for name, text in node.status.allocatable.items():
        try:
            result[name] = quantity_milli(text)
        except ValueError:
            continue
    return result


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 timestamp from the API, or None when absent or malformed."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None
