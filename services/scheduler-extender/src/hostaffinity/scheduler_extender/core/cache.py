"""What the extender knows: the engine's index plus what a scheduler in mid-bind has not told it.

Fed event by event (Pods, Nodes, Namespaces from informers; placements from the topology KV) and
read by the decisions, all on one event loop, so a decision never sees half an update. Beyond the
engine's index it keeps:

- pending pods (not yet assigned, as the informer reports them), so a bind call that names only
  the pod can index it;
- pods in flight (`inflight.InFlight`): asked about by a filter, not yet reported bound. One that
  is reserved on a node counts in the index as if bound there, exactly as kube-scheduler's own
  cache counts an assumed pod, until the informer reports it bound, deleted or unschedulable, or
  the reservation ages out;
- the replicas of each owner (controller ownerReference) per node, for spreading.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace, Node, Pod
from hostaffinity.runtime.process.config import SharedSettings
from hostaffinity.scheduler_extender.config import ExtenderSettings
from hostaffinity.scheduler_extender.core.inflight import InFlight, InFlightPod
from hostaffinity.schema.names import LABEL_ESXI_HOST

# Where a caller names none (tests), the config's own defaults.
_SHARED = SharedSettings()
_DEFAULTS = ExtenderSettings()

SOURCES: Final = ("pods", "nodes", "namespaces", "placements")
SyncCheck = Callable[[], bool]


def owner_of(pod: Pod) -> str | None:
    """The controller's uid (`kind/name` when the uid is missing), or None for a bare pod."""
    for ref in pod.metadata.owner_references:
        if ref.controller:
            return ref.uid or f"{pod.metadata.namespace}/{ref.kind}/{ref.name}"
    return None


def _same_pod(known: Pod, reported: Pod) -> bool:
    uids = (known.metadata.uid, reported.metadata.uid)
    return not all(uids) or uids[0] == uids[1]


def _bound(pod: Pod, node: str) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))


class ExtenderCache:
    """The index and engine the decisions read, with sync state and age per source."""

    def __init__(
        self,
        *,
        physical_anti_affinity: PhysicalAntiAffinity = _SHARED.physical_anti_affinity,
        fail_unplaced: bool = _SHARED.fails_unplaced,
        clock: Callable[[], float] = time.monotonic,
        inflight_capacity: int = _DEFAULTS.inflight_capacity,
        inflight_max_age_seconds: float = _DEFAULTS.inflight_max_age_seconds,
        fleet: FleetMembers | None = None,
    ) -> None:
        self.index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
        self.engine = AffinityEngine(self.index, fail_unplaced=fail_unplaced)
        self._clock = clock
        self._checks: dict[str, SyncCheck] = {}
        self._updated: dict[str, float] = {}
        self._pending: dict[str, Pod] = {}
        self.in_flight = InFlight(
            capacity=inflight_capacity, max_age_seconds=inflight_max_age_seconds, clock=clock
        )
        self._replicas: dict[str, dict[str, str]] = {}
        self._owner: dict[str, str] = {}
        # Other clusters' fleet group members, as the fleet view places them (fleet_filter.py).
        self.fleet = fleet or FleetMembers("")

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

    def upsert_pod(self, pod: Pod, *, unschedulable: bool = False) -> None:
        """A pod as the API reports it. An unassigned pod keeps its reservation unless
        kube-scheduler marked it unschedulable (or it is another pod under the same name)."""
        key = pod.key
        if pod.spec.node_name:
            self._pending.pop(key, None)
            self.in_flight.pop(key)
        else:
            self._pending[key] = pod
            entry = self.in_flight.get(key)
            if entry is not None and (unschedulable or not _same_pod(entry.pod, pod)):
                self.in_flight.pop(key)
            elif entry is not None and entry.node is not None:
                pod = _bound(pod, entry.node)
        self._index_pod(pod)
        self._touch("pods")

    def remove_pod(self, key: str) -> None:
        """A pod was deleted."""
        self._pending.pop(key, None)
        self.in_flight.pop(key)
        self.index.remove_pod(key)
        self._untrack_owner(key)
        self._touch("pods")

    def note_incoming(self, pod: Pod) -> None:
        """kube-scheduler is placing `pod` (again): in flight, with no reservation yet."""
        self._forget(self.in_flight.expire())
        if pod.spec.node_name:
            return
        if self.in_flight.get(pod.key) is not None:
            self._release(pod.key)  # a retry: its earlier reservation no longer holds
        elif self.index.pod(pod.key) is not None:
            return  # the informer reported it bound already
        self._forget(self.in_flight.note(pod))

    def reserve(self, pod: Pod, node: str) -> None:
        """Count `pod` on `node` until the informer reports where it went."""
        self._forget(self.in_flight.note(pod, node))
        self._index_pod(_bound(pod, node))

    def assume(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Record a binding this extender just made; False when the pod's spec is unknown yet
        (the informer then reports it, bound, soon)."""
        key = f"{namespace}/{name}"
        if self.index.pod(key) is not None and key not in self.in_flight:
            return True  # the informer reported the binding already
        entry = self.in_flight.get(key)
        pod = entry.pod if entry is not None else self._pending.get(key)
        if pod is None or (uid and pod.metadata.uid and pod.metadata.uid != uid):
            return False
        self.reserve(pod, node)
        return True

    def give_up(self, keys: list[str]) -> None:
        """Stop waiting for these in-flight pods: their placement did not come in time."""
        self._forget(self.in_flight.give_up(keys))

    def _release(self, key: str) -> None:
        entry = self.in_flight.pop(key)
        if entry is not None:
            self._forget([entry])

    def _forget(self, dropped: Iterable[InFlightPod]) -> None:
        """Reservations that ended without the informer's word: no longer counted."""
        for entry in dropped:
            if entry.node is not None:
                key = entry.pod.key
                self.index.remove_pod(key)
                self._untrack_owner(key)

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
