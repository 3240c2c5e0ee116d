"""The install's placement summary: `hostaffinity-placements`, one WorkloadPlacement per workload
(`workload.<namespace>.<kind>.<name>`), which the fleet hub sources (docs/fleet.md).

The descheduler publishes it because it always runs and already holds every pod and the
topology. A workload's key is written when what it says changes (a replica placed, gone, or
its node's VM moved to another host; `observed_at` alone never rewrites it), deleted when the
workload's last replica goes, and never rewritten on a restart: the first pass reads what the
bucket holds and writes only the differences (a summary left by a workload that went while the
descheduler was away is deleted then).

What counts as a workload: what a pod's controller says (a ReplicaSet's pods are their
Deployment's, affinity.workloads.workload_of); a pod of its own only when it carries the
`hostaffinity.io/fleet-group` label. DaemonSet pods and static pods' mirrors are left out: they
sit on every node by design, and would only say so.

Cost: a change costs its workload's replicas; the first pass costs every pod once. At 150,000
pods (bench/placement_summary_bench.py, bench/README.md "Fleet"): 15,000 summaries written in
5.7 s at start, a restart's pass 2.1 s writing nothing, a vMotion 9 ms p50 / 26 ms p99 (about 28
summaries rewritten), 71 MiB held beside the descheduler's state.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Final

import msgspec
from nats.errors import Error as NatsError
from nats.js.kv import KeyValue

from hostaffinity.affinity.index import ClusterIndex, PodRecord
from hostaffinity.affinity.workloads import DAEMON_SET
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.schema import (
    LABEL_FLEET_GROUP,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_host_id,
    workload_key,
)

_log = logging.getLogger(__name__)
STANDALONE: Final = "Pod"
# Changes are gathered this long before they are written: a rollout's replicas make one write
# per workload, not one per pod.
DEFAULT_INTERVAL_SECONDS: Final = 1.0
_RETRY_SECONDS: Final = 5.0


def summary_key_of(record: PodRecord) -> tuple[str, str, str] | None:
    """(namespace, kind, name) of the workload the pod is summarised under; None: left out."""
    workload = record.workload
    if workload is None:
        if LABEL_FLEET_GROUP not in record.labels:
            return None
        return record.namespace, STANDALONE, record.key.partition("/")[2]
    if workload.kind == DAEMON_SET:
        return None
    return workload.namespace, workload.kind, workload.name


def _digest(value: WorkloadPlacement) -> bytes:
    """What a summary says, without when it was observed."""
    unstamped = msgspec.structs.replace(value, observed_at="")
    return hashlib.blake2b(msgspec.json.encode(unstamped), digest_size=16).digest()


class PlacementSummary:
    """Keeps the bucket equal to what the state says, one workload at a time."""

    def __init__(
        self,
        state: ClusterState,
        cluster: str,
        *,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._state = state
        self._cluster = cluster
        self._interval = interval_seconds
        self._now = now
        self.placements: dict[str, NodePlacement] = {}
        # What the bucket holds (by key, a digest of the value), and each pod's summary key.
        self.published: dict[str, bytes] = {}
        self._summarised: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}
        self._dirty: set[str] = set()
        self._position = 0
        self._everything = True
        self.writes = 0
        self.deletes = 0

    # -- what changed --------------------------------------------------------------------------

    def placement_changed(self, node: str, placement: NodePlacement | None) -> None:
        """A node's placement from the topology watch: its pods' workloads say another host."""
        if placement is None:
            self.placements.pop(node, None)
        else:
            self.placements[node] = placement
        for record in self._state.index.pods_on(node):
            if (key := self._summarised.get(record.key)) is not None:
                self._dirty.add(key)

    def _collect(self) -> None:
        """Pod changes since the last pass (all pods when the journal no longer reaches back)."""
        changed, self._position = self._state.pod_changes(self._position)
        if changed is None or self._everything:
            self._everything = False
            self._summarised.clear()
            self._members.clear()
            changed = [record.key for record in self._state.index.pods()]
            self._dirty |= set(self.published)
        for pod_key in changed:
            self._resummarise(pod_key)

    def _resummarise(self, pod_key: str) -> None:
        before = self._summarised.pop(pod_key, None)
        if before is not None:
            self._members.get(before, set()).discard(pod_key)
            self._dirty.add(before)
        record = self._state.index.pod(pod_key)
        parts = None if record is None else summary_key_of(record)
        if parts is None:
            return
        key = workload_key(*parts)
        self._summarised[pod_key] = key
        self._members.setdefault(key, set()).add(pod_key)
        self._dirty.add(key)

    # -- what to write -------------------------------------------------------------------------

    def summary(self, key: str) -> WorkloadPlacement | None:
        """The workload's summary now; None when it has no replica left."""
        members = self._members.get(key)
        if not members:
            self._members.pop(key, None)
            return None
        index: ClusterIndex = self._state.index
        records = [r for r in (index.pod(pod) for pod in sorted(members)) if r is not None]
        if not records:
            return None
        parts = summary_key_of(records[0])
        assert parts is not None  # members are only pods that have one
        groups = sorted({r.labels.get(LABEL_FLEET_GROUP, "") for r in records} - {""})
        return WorkloadPlacement(
            cluster=self._cluster,
            namespace=parts[0],
            kind=parts[1],
            name=parts[2],
            fleet_group=groups[0] if groups else "",
            replicas=[self._replica(record) for record in records],
        )

    def _replica(self, record: PodRecord) -> ReplicaPlacement:
        pod = record.key.partition("/")[2]
        placed = self.placements.get(record.node)
        if placed is None:
            return ReplicaPlacement(pod=pod, node=record.node)
        return ReplicaPlacement(
            pod=pod,
            node=record.node,
            host_id=fleet_host_id(placed.vcenter_uuid, placed.host_moid, placed.host_name),
            host_name=placed.host_name,
            vcenter=placed.vcenter,
            vsphere_cluster_moid=placed.cluster_moid,
            vm_moid=placed.vm_moid,
        )

    def pending(self) -> Iterable[tuple[str, WorkloadPlacement | None]]:
        """Each changed key with its summary (None: delete it), skipping what the bucket
        already says; taken from the dirty set as it goes."""
        self._collect()
        dirty, self._dirty = self._dirty, set()
        stamp = self._now().isoformat()
        for key in sorted(dirty):
            value = self.summary(key)
            if value is None:
                if key in self.published:
                    yield key, None
                continue
            if self.published.get(key) != _digest(value):
                yield key, msgspec.structs.replace(value, observed_at=stamp)

    # -- the bucket ----------------------------------------------------------------------------

    async def load(self, kv: KeyValue) -> None:
        """What the bucket holds now, as digests, so the first pass writes only differences."""
        for key, value in (await live_entries(kv)).items():
            try:
                stored = msgspec.json.decode(value, type=WorkloadPlacement)
            except msgspec.DecodeError:
                self.published[key] = b""  # rewritten by the first pass
                continue
            self.published[key] = _digest(stored)

    async def flush(self, kv: KeyValue) -> None:
        """Write every pending change; one that fails stays pending for the next pass."""
        for key, value in list(self.pending()):
            try:
                if value is None:
                    await kv.delete(key)  # a marker: the hub's view drops the key too
                    self.published.pop(key, None)
                    self.deletes += 1
                else:
                    await kv.put(key, msgspec.json.encode(value))
                    self.published[key] = _digest(value)
                    self.writes += 1
            except (NatsError, TimeoutError) as error:
                _log.warning("placement summary %s not written (%r); next pass", key, error)
                self._dirty.add(key)

    async def run(self, kv: KeyValue, synced: Callable[[], bool]) -> None:
        """Once the state is complete: read the bucket, then write changes every interval."""
        while True:
            try:
                await self.load(kv)
                break
            except (NatsError, TimeoutError) as error:
                _log.warning("placement summary not read (%r); retrying", error)
                await asyncio.sleep(_RETRY_SECONDS)
        while True:
            if synced():
                await self.flush(kv)
            await asyncio.sleep(self._interval)
