"""The Kubernetes API shapes the engine reads, decoded straight from API JSON.

Only the fields scheduling needs are declared; msgspec skips every other field, so a Pod or Node
from any API version decodes without generated models (ARCHITECTURE.md "Kubernetes access").
`None` and an empty struct are kept apart on purpose: a null `namespaceSelector` or
`labelSelector` means something different from `{}`.
"""

from __future__ import annotations

import sys
from typing import Final

import msgspec

from hostaffinity.affinity.sharing import with_shared_parts


class ApiStruct(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Base for Kubernetes API shapes (ours and the services'): camelCase JSON names, unknown
    fields ignored."""


class LabelSelectorRequirement(ApiStruct, frozen=True):
    key: str
    operator: str
    values: list[str] | None = None


class LabelSelector(ApiStruct, frozen=True):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class PodAffinityTerm(ApiStruct, frozen=True):
    topology_key: str = ""
    label_selector: LabelSelector | None = None
    namespaces: list[str] | None = None
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] | None = None
    mismatch_label_keys: list[str] | None = None


class WeightedPodAffinityTerm(ApiStruct, frozen=True):
    weight: int
    pod_affinity_term: PodAffinityTerm


class PodAffinity(ApiStruct, frozen=True):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = (
        None
    )


class NodeSelectorRequirement(ApiStruct, frozen=True):
    key: str
    operator: str
    values: list[str] | None = None


class NodeSelectorTerm(ApiStruct, frozen=True):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(ApiStruct, frozen=True):
    node_selector_terms: list[NodeSelectorTerm] = msgspec.field(default_factory=list)


class PreferredSchedulingTerm(ApiStruct, frozen=True):
    weight: int
    preference: NodeSelectorTerm


class NodeAffinity(ApiStruct, frozen=True):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = (
        None
    )


class Affinity(ApiStruct, frozen=True):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(ApiStruct, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Taint(ApiStruct, frozen=True):
    key: str
    effect: str
    value: str = ""


class OwnerReference(ApiStruct, frozen=True):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(ApiStruct, frozen=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)
    # Set once a delete is accepted; topology spread stops counting the pod from then on.
    deletion_timestamp: str | None = None


class TopologySpreadConstraint(ApiStruct, frozen=True):
    """core/v1 TopologySpreadConstraint; absent optional fields stay None (their defaults are
    the scheduler's, applied in topology_spread.compile_spread_constraints)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] | None = None


class PodSpec(ApiStruct, frozen=True):
    node_name: str = ""
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] = msgspec.field(default_factory=list)
    topology_spread_constraints: list[TopologySpreadConstraint] = msgspec.field(
        default_factory=list
    )


class PodStatus(ApiStruct, frozen=True):
    phase: str = ""


class Pod(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def key(self) -> str:
        """The `namespace/name` key the index stores the pod under.

        Interned: the index, the descheduler's state and their sets all keep the key, and each
        asks the pod for it; one string per pod instead of one per asker.
        """
        return sys.intern(f"{self.metadata.namespace}/{self.metadata.name}")


class NodeSpec(ApiStruct, frozen=True):
    taints: list[Taint] = msgspec.field(default_factory=list)
    unschedulable: bool = False


class Node(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)


class Namespace(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


_POD_DECODER = msgspec.json.Decoder(Pod)
_NODE_DECODER = msgspec.json.Decoder(Node)
_NAMESPACE_DECODER = msgspec.json.Decoder(Namespace)


# What a workload's replicas repeat. An informer's cache holds every pod of the cluster, so these
# are held once (sharing.with_shared_fields; decoded pods are read, never changed).
SHARED_POD_META: Final = ("namespace", "labels", "annotations", "owner_references")
SHARED_POD_SPEC: Final = (
    "node_name",
    "node_selector",
    "affinity",
    "tolerations",
    "topology_spread_constraints",
)


def decode_pod(data: bytes | str) -> Pod:
    """Decode one Pod from its API JSON, sharing what it repeats from its workload's other
    replicas (bench/pod_memory_bench.py: a quarter of the memory)."""
    return with_shared_parts(_POD_DECODER.decode(data), SHARED_POD_META, SHARED_POD_SPEC)


def decode_node(data: bytes | str) -> Node:
    """Decode one Node from its API JSON."""
    return _NODE_DECODER.decode(data)


def decode_namespace(data: bytes | str) -> Namespace:
    """Decode one Namespace from its API JSON."""
    return _NAMESPACE_DECODER.decode(data)
