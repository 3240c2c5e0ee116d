"""The translator's loop: keeps pods, namespaces and topology, plans, applies, reports.

Every change marks the state dirty; after `debounce_seconds` one plan per vCenter is made from
scratch (the planner is fast enough that incremental planning would only add ways to be wrong)
and every cluster that needs it gets one reconfigure. Each vCenter is a `VCenterTarget` of its
own: its plan holds only its nodes' VMs and hosts, its rules go only to it, and its ownership
records name it. A periodic resync reads each vCenter again and repairs drift. A vCenter whose
cycle fails (it or NATS away) is logged and retried after `error_retry_seconds` on its own; the
others go on; nothing here raises out.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
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
from hostaffinity.runtime.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.kube_events import EventRecorder, ObjectRef
from hostaffinity.runtime.kv import Bootstrapped, HostChange, NodeChange, TopologyChange
from hostaffinity.schema import EsxiHost, NodePlacement

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Pacing:
    debounce_seconds: float = 0.2
    resync_seconds: float = 300.0
    error_retry_seconds: float = 5.0


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class VCenterTarget:
    """One vCenter's share of the work: the planner settings that name it, its ownership
    records and the applier that writes to it alone; `connected` says whether it can be
    written now (a cycle of a vCenter not logged in yet waits for the next try)."""

    settings: PlannerSettings
    applier: DrsApplier
    records: OwnershipRecords
    connected: Callable[[], bool] = _always

    @property
    def name(self) -> str:
        return self.settings.vcenter


class DrsTranslator:
    """Desired DRS state from the cluster's pods, for each vCenter; one instance per leading
    replica."""

    def __init__(
        self,
        targets: Sequence[VCenterTarget],
        recorder: EventRecorder | None,
        metrics: DrsMetrics,
        *,
        physical_cluster_wide: bool = False,
        pacing: Pacing | None = None,
    ) -> None:
        self.targets = list(targets)
        self.index = ClusterIndex(physical_anti_affinity=physical_cluster_wide)
        self.pods: dict[str, Pod] = {}
        self.placements: dict[str, NodePlacement] = {}
        self.hosts: dict[str, EsxiHost] = {}
        self.topology_synced = False
        # Passes in which every vCenter's cycle succeeded, and each vCenter's own successes.
        self.cycles = 0
        self.completed: dict[str, int] = {target.name: 0 for target in self.targets}
        self.last_plan_seconds = 0.0
        self._recorder = recorder
        self._metrics = metrics
        self._pacing = pacing or Pacing()
        self._dirty = asyncio.Event()
        self._resync_now = asyncio.Event()
        self._reported: dict[str, set[tuple[str, ...]]] = {}
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
        """Plan and apply until cancelled; each vCenter's first cycle reads it whole, and a
        vCenter whose cycle failed is read whole again at its next try."""
        next_resync = {target.name: 0.0 for target in self.targets}
        retrying: set[str] = set()  # failed: left alone until their next resync is due
        while True:
            raise_if_cancel_requested()  # `_wait_for_work`'s wait_for may have swallowed it
            now = time.monotonic()
            everything = self._resync_now.is_set()
            reread = {name for name, due in next_resync.items() if everything or now >= due}
            self._resync_now.clear()
            self._dirty.clear()
            offline = {t.name for t in self.targets if not t.connected()}
            waiting = (retrying - reread) | offline
            failed = await self._cycle_all(reread, skip=waiting)
            done = time.monotonic()
            for name in reread - failed - offline:
                next_resync[name] = done + self._pacing.resync_seconds
            for name in failed:
                next_resync[name] = done + self._pacing.error_retry_seconds
            retrying = (waiting - offline) | failed
            # A vCenter not logged in yet keeps its first (whole) read due; `wake` says when.
            online = [due for name, due in next_resync.items() if name not in offline]
            await self._wait_for_work(min(online, default=done + self._pacing.resync_seconds))

    def wake(self) -> None:
        """Something outside the inputs changed (a vCenter logged in): cycle again soon."""
        self._dirty.set()

    async def _cycle_all(self, reread: set[str], *, skip: set[str]) -> set[str]:
        """One cycle per vCenter but those to `skip`; returns the names of those that failed."""
        failed: set[str] = set()
        for target in self.targets:
            if target.name in skip:
                continue
            try:
                await self.cycle(target, reread=target.name in reread)
            except Exception as err:  # this vCenter or NATS away: log, the others go on
                raise_if_cancel_requested()
                _log.warning(
                    "DRS cycle of vCenter %s failed (%s); retrying in %.1fs",
                    target.name,
                    str(err) or repr(err),
                    self._pacing.error_retry_seconds,
                )
                failed.add(target.name)
        if not failed and not skip:
            self.cycles += 1
        return failed

    async def _wait_for_work(self, next_resync: float) -> None:
        # The cycle's NATS calls (ownership records) go through 3.11's `wait_for`, which may have
        # swallowed a cancellation: the wait below would then last until the next resync.
        raise_if_cancel_requested()
        retries = [t.applier.next_retry() for t in self.targets]
        wake = min([next_resync, *(retry for retry in retries if retry is not None)])
        timeout = max(0.0, wake - time.monotonic())
        try:
            await asyncio.wait_for(self._dirty.wait(), timeout)
        except TimeoutError:
            return
        await asyncio.sleep(self._pacing.debounce_seconds)  # let a burst of changes gather

    async def cycle(self, target: VCenterTarget, *, reread: bool = False) -> Plan:
        """Plan every cluster of one vCenter and apply it there; returns the plan."""
        self._cycling = True
        try:
            return await self._cycle(target, reread)
        finally:
            self._cycling = False

    async def _cycle(self, target: VCenterTarget, reread: bool) -> Plan:
        started = time.perf_counter()
        desired = plan(self.index, self.placements, self.hosts, self.pods.values(), target.settings)
        self.last_plan_seconds = time.perf_counter() - started
        self._metrics.plan_duration.record(self.last_plan_seconds)
        await self._report(target, desired.conflicts, desired.untranslatable)
        clusters = set(desired.clusters) | set(target.records.by_cluster)
        for cluster in sorted(clusters):
            cluster_plan = desired.clusters.get(cluster) or ClusterPlan(cluster)
            await target.applier.apply(cluster_plan, reread=reread)
        self.completed[target.name] += 1
        return desired

    async def _report(
        self,
        target: VCenterTarget,
        conflicts: Iterable[Conflict],
        untranslatable: Iterable[Untranslatable],
    ) -> None:
        """Bus event, metric and a Kubernetes Event on each pod, once per distinct problem."""
        current: set[tuple[str, ...]] = set()
        reported = self._reported.get(target.name, set())
        for conflict in conflicts:
            key = ("conflict", conflict.cluster_moid, conflict.name, conflict.reason, *conflict.vms)
            current.add(key)
            if key in reported:
                continue
            _log.warning(
                "not sent to %s of vCenter %s: %s (%s)",
                conflict.cluster_moid,
                target.name,
                conflict.name,
                conflict.message,
            )
            target.applier.report_conflict(
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
            if key in reported:
                continue
            target.applier.report_conflict(
                problem.cluster_moid,
                "",
                "not-translatable",
                problem.message,
                vms=(),
                pods=(problem.pod,),
            )
            await self._pod_events((problem.pod,), "DrsNotTranslatable", problem.message)
        self._reported[target.name] = current

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
