"""What the extender knows: the engine's index plus what a binder must remember.

Fed event by event (Pods, Nodes, Namespaces from informers; placements from the topology KV) and
read by the decisions, all on one event loop, so a decision never sees half an update. Beyond the
engine's index it keeps:

- pending pods (not yet assigned), so a bind call that names only the pod can index it;
- assumed bindings: a pod this extender bound before its own informer saw the binding, so the
  next filter already counts it (kube-scheduler's cache does the same, "assume");
- the replicas of each owner (controller ownerReference) per node, for spreading.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Namespace, Node, Pod
from hostaffinity.schema.names import LABEL_ESXI_HOST

SOURCES: Final = ("pods", "nodes", "namespaces", "placements")
SyncCheck = Callable[[], bool]


class Assumed(msgspec.Struct, frozen=True):
    """A binding this extender made that its pod informer has not reported yet."""

    uid: str
    node: str


def owner_of(pod: Pod) -> str | None:
    """The controller's uid (`kind/name` when the uid is missing), or None for a bare pod."""
    for ref in pod.metadata.owner_references:
        if ref.controller:
            return ref.uid or f"{pod.metadata.namespace}/{ref.kind}/{ref.name}"
    return None


def _bound(pod: Pod, node: str) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))


class ExtenderCache:
    """The index and engine the decisions read, with sync state and age per source."""

    def __init__(
        self,
        *,
        physical_anti_affinity: bool = False,
        fail_unplaced: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
        self.engine = AffinityEngine(self.index, fail_unplaced=fail_unplaced)
        self._clock = clock
        self._checks: dict[str, SyncCheck] = {}
        self._updated: dict[str, float] = {}
        self._pending: dict[str, Pod] = {}
        self._assumed: dict[str, Assumed] = {}
        self._replicas: dict[str, dict[str, str]] = {}
        self._owner: dict[str, str] = {}

    # -- sync state ----------------------------------------------------------------------------

    def add_sync_check(self, source: str, check: SyncCheck) -> None:
        """Register how to tell that `source` (one of SOURCES) holds the whole cluster."""
        self._checks[source] = check

    def is_synced(self, source: str) -> bool:
        """Whether `source` holds the whole cluster; a source without a check never started."""
        check = self._checks.get(source)
        return check is not None and check()

    def not_synced(self) -> list[str]:
        """Sources still loading."""
        return [source for source in SOURCES if not self.is_synced(source)]

    def ages(self) -> Mapping[str, float]:
        """Seconds since each source last changed the cache (absent: never)."""
        now = self._clock()
        return {source: now - at for source, at in self._updated.items()}

    def _touch(self, source: str) -> None:
        self._updated[source] = self._clock()

    # -- events --------------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        """A pod as the API reports it; an unassigned pod we bound keeps our binding."""
        key = pod.key
        if pod.spec.node_name:
            self._pending.pop(key, None)
            self._assumed.pop(key, None)
        else:
            assumed = self._assumed.get(key)
            if assumed is not None and assumed.uid == pod.metadata.uid:
                pod = _bound(pod, assumed.node)
            else:
                self._assumed.pop(key, None)
                self._pending[key] = pod
        self._index_pod(pod)
        self._touch("pods")

    def remove_pod(self, key: str) -> None:
        """A pod was deleted."""
        self._pending.pop(key, None)
        self._assumed.pop(key, None)
        self.index.remove_pod(key)
        self._untrack_owner(key)
        self._touch("pods")

    def note_incoming(self, pod: Pod) -> None:
        """Remember a pod kube-scheduler asked about, in case the bind call comes first."""
        if not pod.spec.node_name and self.index.pod(pod.key) is None:
            self._pending.setdefault(pod.key, pod)

    def assume(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Record a binding this extender just made; False when the pod's spec is unknown yet
        (the binding then applies as soon as the informer reports the pod)."""
        key = f"{namespace}/{name}"
        if self.index.pod(key) is not None:  # the informer reported the binding already
            return True
        self._assumed[key] = Assumed(uid, node)
        pod = self._pending.pop(key, None)
        if pod is None or (uid and pod.metadata.uid and pod.metadata.uid != uid):
            return False
        self._index_pod(_bound(pod, node))
        return True

    def upsert_node(self, node: Node) -> None:
        self.index.upsert_node(node)
        self._touch("nodes")

    def remove_node(self, name: str) -> None:
        self.index.remove_node(name)
        self._touch("nodes")

    def upsert_namespace(self, namespace: Namespace) -> None:
        self.index.upsert_namespace(namespace)
        self._touch("namespaces")

    def remove_namespace(self, name: str) -> None:
        self.index.remove_namespace(name)
        self._touch("namespaces")

    def set_placement(self, node: str, host_label: str | None) -> None:
        """The ESXi host (label value) a node's VM runs on, from the topology KV."""
        self.index.set_placement(node, host_label)
        self._touch("placements")

    # -- queries -------------------------------------------------------------------------------

    def host_of(self, node: str) -> str | None:
        """The node's ESXi host: the placement first, else the node's host label."""
        return self.index.domain(node, LABEL_ESXI_HOST)

    def replicas(self, owner: str) -> Mapping[str, str]:
        """Assigned pods of one owner: pod key -> node."""
        return self._replicas.get(owner, {})

    def _index_pod(self, pod: Pod) -> None:
        key = pod.key
        self.index.upsert_pod(pod)
        self._untrack_owner(key)
        owner = owner_of(pod)
        if owner is not None and self.index.pod(key) is not None:
            self._owner[key] = owner
            self._replicas.setdefault(owner, {})[key] = pod.spec.node_name

    def _untrack_owner(self, key: str) -> None:
        owner = self._owner.pop(key, None)
        if owner is None:
            return
        replicas = self._replicas[owner]
        replicas.pop(key, None)
        if not replicas:
            del self._replicas[owner]
