"""Which workload a pod is a replica of, read from its controller ownerReference.

A Deployment's pods are owned by one of its ReplicaSets, named `<deployment>-<pod-template-hash>`
with the hash also on each pod as the `pod-template-hash` label (kubernetes
pkg/controller/deployment/sync.go getNewReplicaSet, v1.36). Reading the Deployment from that
convention keeps the replicas of a rollout's old and new ReplicaSets together without a
ReplicaSet informer. A KubeVirt virt-launcher pod is owned by its VirtualMachineInstance; the
VMI's own owner (a VirtualMachineInstanceReplicaSet) is known only to callers that read VMIs
(exposure.by_owner takes that map).
"""

from __future__ import annotations

import sys
from typing import Final

import msgspec

from hostaffinity.affinity.model import OwnerReference, Pod
from hostaffinity.affinity.sharing import Interner

POD_TEMPLATE_HASH: Final = "pod-template-hash"
REPLICA_SET: Final = "ReplicaSet"
DEPLOYMENT: Final = "Deployment"
DAEMON_SET: Final = "DaemonSet"
VMI: Final = "VirtualMachineInstance"
# kubelet marks the API mirror of a static pod with this annotation (pkg/kubelet/types).
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"


class WorkloadRef(msgspec.Struct, frozen=True, gc=False, order=True):
    """A workload: the kind, namespace and name of what owns a set of replicas."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


# The index keeps one per pod: replicas share one (and, once it is dropped, its strings).
_SHARED: Final[Interner[WorkloadRef, WorkloadRef]] = Interner()


def controller_of(pod: Pod) -> OwnerReference | None:
    """The pod's controller ownerReference, if any."""
    for ref in pod.metadata.owner_references:
        if ref.controller:
            return ref
    return None


def workload_of(pod: Pod) -> WorkloadRef | None:
    """The workload the pod is a replica of; None for a pod without a controller."""
    ref = controller_of(pod)
    if ref is None:
        return None
    namespace = pod.metadata.namespace
    if ref.kind == REPLICA_SET:
        suffix = "-" + pod.metadata.labels.get(POD_TEMPLATE_HASH, "")
        if len(suffix) > 1 and ref.name.endswith(suffix) and len(ref.name) > len(suffix):
            workload = WorkloadRef(DEPLOYMENT, namespace, sys.intern(ref.name[: -len(suffix)]))
            return _SHARED.share(workload, workload)
    workload = WorkloadRef(sys.intern(ref.kind), namespace, sys.intern(ref.name))
    return _SHARED.share(workload, workload)


def stays_with_node(pod: Pod) -> bool:
    """A DaemonSet's pod or a static pod's mirror: it never moves to another node."""
    ref = controller_of(pod)
    return (ref is not None and ref.kind == DAEMON_SET) or (
        MIRROR_POD_ANNOTATION in pod.metadata.annotations
    )
