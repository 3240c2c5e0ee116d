"""The translator's loop: keeps pods, namespaces and topology, plans, applies, reports.

Every change marks the state dirty; after `debounce_seconds` one plan is made from scratch (the
planner is fast enough that incremental planning would only add ways to be wrong) and every
cluster that needs it gets one reconfigure. A periodic resync reads vCenter again and repairs
drift. A cycle that fails (vCenter or NATS away) is logged and retried; nothing here raises out.
"""

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Namespace, Pod
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.planner import (
    ClusterPlan,
    Conflict,
    Plan,
    PlannerSettings,
    Untranslatable,
    plan,
)
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.runtime.bus.kv import Bootstrapped, HostChange, NodeChange, TopologyChange
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.schema import EsxiHost, NodePlacement

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Pacing:
    debounce_seconds: float = 0.2
    resync_seconds: float = 300.0
    error_retry_seconds: float = 5.0


class DrsTranslator:
    """Desired DRS state from the cluster's pods; one instance per leading replica."""

    def __init__(
        self,
        settings: PlannerSettings,
        applier: DrsApplier,
        records: OwnershipRecords,
        recorder: EventRecorder | None,
        metrics: DrsMetrics,
        *,
        physical_cluster_wide: bool = False,
        pacing: Pacing | None = None,
    ) -> None:
        self.settings = settings
        self.index = ClusterIndex(physical_anti_affinity=physical_cluster_wide)
        self.pods: dict[str, Pod] = {}
        self.placements: dict[str, NodePlacement] = {}
        self.hosts: dict[str, EsxiHost] = {}
        self.topology_synced = False
        self.cycles = 0
        self.last_plan_seconds = 0.0
        self._applier = applier
        self._records = records
        self._recorder = recorder
        self._metrics = metrics
        self._pacing = pacing or Pacing()
        self._dirty = asyncio.Event()
        self._resync_now = asyncio.Event()
        self._reported: set[tuple[str, ...]] = set()
        self._cycling = False

    # -- inputs ---------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        self.pods[pod.key] = pod
        self.index.upsert_pod(pod)
        self._dirty.set()

    def remove_pod(self, key: str) -> None:
        self.pods.pop(key, None)
        self.index.remove_pod(key)
        self._dirty.set()

    def upsert_namespace(self, namespace: Namespace) -> None:
        self.index.upsert_namespace(namespace)
        self._dirty.set()

    def remove_namespace(self, name: str) -> None:
        self.index.remove_namespace(name)
        self._dirty.set()

    def on_topology(self, change: TopologyChange) -> None:
        if isinstance(change, NodeChange):
            if change.placement is None:
                self.placements.pop(change.node, None)
            else:
                self.placements[change.node] = change.placement
        elif isinstance(change, HostChange):
            if change.host is None:
                self.hosts.pop(change.moid, None)
            else:
                self.hosts[change.moid] = change.host
        elif isinstance(change, Bootstrapped):
            self.topology_synced = True
        self._dirty.set()

    def idle(self) -> bool:
        """Nothing waiting to be planned and no cycle running."""
        return not self._dirty.is_set() and not self._cycling

    def resync(self) -> None:
        """Ask for a full resync (vCenter read again) as soon as possible."""
        self._resync_now.set()
        self._dirty.set()

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Plan and apply until cancelled; the first cycle reads vCenter whole."""
        next_resync = 0.0
        while True:
            raise_if_cancel_requested()  # `_wait_for_work`'s wait_for may have swallowed it
            now = time.monotonic()
            full = now >= next_resync or self._resync_now.is_set()
            self._resync_now.clear()
            self._dirty.clear()
            try:
                await self.cycle(reread=full)
            except Exception as err:  # vCenter or NATS away: log, wait, try again
                raise_if_cancel_requested()
                _log.warning(
                    "DRS cycle failed (%r); retrying in %.1fs",
                    err,
                    self._pacing.error_retry_seconds,
                )
                await asyncio.sleep(self._pacing.error_retry_seconds)
                self._resync_now.set()
                continue
            if full:
                next_resync = time.monotonic() + self._pacing.resync_seconds
            await self._wait_for_work(next_resync)

    async def _wait_for_work(self, next_resync: float) -> None:
        # The cycle's NATS calls (ownership records) go through 3.11's `wait_for`, which may have
        # swallowed a cancellation: the wait below would then last until the next resync.
        raise_if_cancel_requested()
        wake = min(next_resync, self._applier.next_retry() or next_resync)
        timeout = max(0.0, wake - time.monotonic())
        try:
            await asyncio.wait_for(self._dirty.wait(), timeout)
        except TimeoutError:
            return
        await asyncio.sleep(self._pacing.debounce_seconds)  # let a burst of changes gather

    async def cycle(self, *, reread: bool = False) -> Plan:
        """Plan every cluster and apply it; returns the plan."""
        self._cycling = True
        try:
            return await self._cycle(reread)
        finally:
            self._cycling = False

    async def _cycle(self, reread: bool) -> Plan:
        started = time.perf_counter()
        desired = plan(self.index, self.placements, self.hosts, self.pods.values(), self.settings)
        self.last_plan_seconds = time.perf_counter() - started
        self._metrics.plan_duration.record(self.last_plan_seconds)
        await self._report(desired.conflicts, desired.untranslatable, desired.clusters.values())
        clusters = set(desired.clusters) | set(self._records.by_cluster)
        for cluster in sorted(clusters):
            cluster_plan = desired.clusters.get(cluster) or ClusterPlan(cluster)
            await self._applier.apply(cluster_plan, reread=reread)
        self.cycles += 1
        return desired

    async def _report(
        self,
        conflicts: Iterable[Conflict],
        untranslatable: Iterable[Untranslatable],
        clusters: Iterable[ClusterPlan],
    ) -> None:
        """Bus event, metric and a Kubernetes Event on each pod, once per distinct problem; and
        a Kubernetes Event on each pod of a rule held for maintenance (its bus event and metric
        come from the applier, once vCenter took the hold)."""
        current: set[tuple[str, ...]] = set()
        for cluster_plan in clusters:
            for name, hosts in sorted(cluster_plan.maintenance_holds.items()):
                rule = cluster_plan.objects[name]
                key = ("held", cluster_plan.cluster_moid, name, *hosts)
                current.add(key)
                if key not in self._reported:
                    message = f"DRS rule {name} {rule.held_because}"
                    await self._pod_events(rule.pods, "DrsRuleHeld", message)
        for conflict in conflicts:
            key = ("conflict", conflict.cluster_moid, conflict.name, conflict.reason, *conflict.vms)
            current.add(key)
            if key in self._reported:
                continue
            _log.warning(
                "not sent to %s: %s (%s)", conflict.cluster_moid, conflict.name, conflict.message
            )
            self._applier.report_conflict(
                conflict.cluster_moid,
                conflict.name,
                conflict.reason,
                conflict.message,
                vms=conflict.vms,
                pods=conflict.pods,
            )
            await self._pod_events(
                conflict.pods,
                "DrsRuleConflict",
                f"DRS rule {conflict.name} not sent: {conflict.message}",
            )
        for problem in untranslatable:
            key = ("untranslatable", problem.pod, problem.message)
            current.add(key)
            if key in self._reported:
                continue
            self._applier.report_conflict(
                problem.cluster_moid,
                "",
                "not-translatable",
                problem.message,
                vms=(),
                pods=(problem.pod,),
            )
            await self._pod_events((problem.pod,), "DrsNotTranslatable", problem.message)
        self._reported = current

    async def _pod_events(self, pods: Iterable[str], reason: str, message: str) -> None:
        if self._recorder is None:
            return
        for key in pods:
            pod = self.pods.get(key)
            if pod is None:
                continue
            meta = pod.metadata
            about = ObjectRef("Pod", meta.name, meta.uid, meta.namespace)
            await self._recorder.record(about, reason, message)
