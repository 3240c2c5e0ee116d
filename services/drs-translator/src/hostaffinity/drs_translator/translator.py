"""The translator's loop: keeps pods, namespaces and topology, plans, applies, reports.

Every change marks the state dirty; after `debounce_seconds` one plan per vCenter is made from
scratch, no earlier plan carried over: its cost follows the pods that carry constraints (kept in
`constrained`), not the cluster, and the loop runs between its clusters (`Planning`). Every
cluster that needs it gets one reconfigure. Each vCenter is a `VCenterTarget` of its
own: its plan holds only its nodes' VMs and hosts, its rules go only to it, and its ownership
records name it. A periodic resync reads each vCenter again and repairs drift. A vCenter whose
cycle fails (it or NATS away) is logged and retried after `error_retry_seconds` on its own; the
others go on; nothing here raises out. `failing` says which vCenters' last cycle failed, since
when and why (a readiness part of that vCenter's own).
"""

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from hostaffinity.affinity.fleet_groups import own_members
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace, Pod
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.drs_translator.core.attention import other_install_rules, unprotected_groups
from hostaffinity.drs_translator.core.plan import (
    ClusterPlan,
    Conflict,
    Plan,
    PlannerSettings,
    Untranslatable,
)
from hostaffinity.drs_translator.core.planner import Planning, asks_for_placement
from hostaffinity.drs_translator.fleet_rules import FleetRules
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.reports import ClusterReports
from hostaffinity.runtime.bus.kv import Bootstrapped, HostChange, NodeChange, TopologyChange
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested, wait_set
from hostaffinity.schema import EsxiHost, NodePlacement, utc_timestamp

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CycleFailure:
    """A vCenter's cycles failing: since the first failure of the run, and the last error."""

    since: str
    why: str


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class VCenterTarget:
    """One vCenter's share of the work: the planner settings that name it, its ownership
    records, the applier that writes to it alone and its clusters' reports. `logged_in` says
    whether its first login is done: until then its cycles wait (`DrsTranslator.wake` says
    when); a later failure is the cycle's, retried after `error_retry_seconds`, which logs in
    again."""

    settings: PlannerSettings
    applier: DrsApplier
    records: OwnershipRecords
    reports: ClusterReports
    logged_in: Callable[[], bool] = _always
    # Its fleet groups' rules, where this install reaches a fleet hub (None: no hub).
    fleet: FleetRules | None = None

    @property
    def name(self) -> str:
        return self.settings.vcenter


@dataclass(slots=True)
class _Lane:
    """One vCenter's loop state, in one record: changes waiting, a full read asked for, a cycle
    running; its cycles that succeeded, its failure now (None: its last cycle did not fail) and
    the problems already reported on its pods (each is reported once while it lasts)."""

    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    resync_now: bool = False
    cycling: bool = False
    completed: int = 0
    failure: CycleFailure | None = None
    reported: set[tuple[str, ...]] = field(default_factory=set)


class DrsTranslator:
    """Desired DRS state from the cluster's pods, for each vCenter; one instance per leading
    replica."""

    def __init__(
        self,
        targets: Sequence[VCenterTarget],
        recorder: EventRecorder | None,
        metrics: DrsMetrics,
        *,
        physical_anti_affinity: PhysicalAntiAffinity = "opt-in",
        pacing: DrsSettings | None = None,
    ) -> None:
        self.targets = list(targets)
        self.index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
        self.pods: dict[str, Pod] = {}
        # The pods whose spec the planner reads (`asks_for_placement`): a plan visits these only.
        self.constrained: dict[str, Pod] = {}
        self.placements: dict[str, NodePlacement] = {}
        self.hosts: dict[str, EsxiHost] = {}
        self.topology_synced = False
        # Cycles that succeeded, of all vCenters together (`completed`: of each).
        self.cycles = 0
        self.last_plan_seconds = 0.0
        self._recorder = recorder
        self._metrics = metrics
        self._pacing = pacing if pacing is not None else DrsSettings()
        self._lanes = {target.name: _Lane() for target in self.targets}

    @property
    def completed(self) -> dict[str, int]:
        """Cycles that succeeded, by vCenter."""
        return {name: lane.completed for name, lane in self._lanes.items()}

    @property
    def failing(self) -> dict[str, CycleFailure]:
        """The vCenters whose cycles fail now: since the first failure, and the last error."""
        return {name: lane.failure for name, lane in self._lanes.items() if lane.failure}

    # -- inputs ---------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        self.pods[pod.key] = pod
        if asks_for_placement(pod):
            self.constrained[pod.key] = pod
        else:
            self.constrained.pop(pod.key, None)
        self.index.upsert_pod(pod)
        self._touch()

    def remove_pod(self, key: str) -> None:
        self.pods.pop(key, None)
        self.constrained.pop(key, None)
        self.index.remove_pod(key)
        self._touch()

    def upsert_namespace(self, namespace: Namespace) -> None:
        self.index.upsert_namespace(namespace)
        self._touch()

    def remove_namespace(self, name: str) -> None:
        self.index.remove_namespace(name)
        self._touch()

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
        self._touch()

    def idle(self) -> bool:
        """Nothing waiting to be planned and no cycle running, in any vCenter."""
        return not any(lane.dirty.is_set() or lane.cycling for lane in self._lanes.values())

    def resync(self) -> None:
        """Ask for a full resync (every vCenter read again) as soon as possible."""
        for lane in self._lanes.values():
            lane.resync_now = True
        self._touch()

    def wake(self) -> None:
        """Something outside the inputs changed (a vCenter logged in): look again soon."""
        self._touch()

    def _touch(self) -> None:
        for lane in self._lanes.values():
            lane.dirty.set()

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Plan and apply until cancelled: one loop per vCenter, side by side, so a vCenter
        that is away or hangs holds back only its own cycles."""
        async with asyncio.TaskGroup() as loops:
            for target in self.targets:
                loops.create_task(self._run_one(target), name=f"drs {target.name}")

    async def _run_one(self, target: VCenterTarget) -> None:
        """One vCenter's loop, from its first login; its first cycle reads it whole, and so
        does the one after a failure."""
        lane = self._lanes[target.name]
        while not target.logged_in():
            lane.dirty.clear()
            await lane.dirty.wait()  # `wake` says when it has logged in
        next_resync = 0.0
        while True:
            raise_if_cancel_requested()  # `_wait_for_work`'s wait_for may have swallowed it
            full = time.monotonic() >= next_resync or lane.resync_now
            lane.resync_now = False
            lane.dirty.clear()
            lane.cycling = True
            try:
                await self.cycle(target, reread=full)
                lane.failure = None
            except Exception as err:  # this vCenter or NATS away: log, wait, try again
                raise_if_cancel_requested()
                why = str(err) or repr(err)
                first = lane.failure
                since = first.since if first is not None else utc_timestamp()
                lane.failure = CycleFailure(since, why)
                _log.warning(
                    "DRS cycle of vCenter %s failed (%s); retrying in %.1fs",
                    target.name,
                    why,
                    self._pacing.error_retry_seconds,
                )
                await asyncio.sleep(self._pacing.error_retry_seconds)
                lane.resync_now = True
                continue
            finally:
                lane.cycling = False
            if full:
                next_resync = time.monotonic() + self._pacing.resync_seconds
            await self._wait_for_work(lane, target.applier, next_resync)

    async def _wait_for_work(self, lane: _Lane, applier: DrsApplier, next_resync: float) -> None:
        # The cycle's NATS calls (ownership records) go through 3.11's `wait_for`, which may have
        # swallowed a cancellation: the wait below would then last until the next resync.
        raise_if_cancel_requested()
        wake = min(
            next_resync, applier.next_retry() or next_resync, applier.next_read() or next_resync
        )
        timeout = max(0.0, wake - time.monotonic())
        if not await wait_set(lane.dirty, timeout):
            return
        await asyncio.sleep(self._pacing.debounce_seconds)  # let a burst of changes gather

    async def cycle(self, target: VCenterTarget, *, reread: bool = False) -> Plan:
        """Plan every cluster of one vCenter and apply it there; returns the plan."""
        for cluster in target.applier.legacy_clusters():  # the first cycle after an upgrade
            await target.applier.rename_legacy(cluster)
        started = time.perf_counter()
        desired = await self._plan(target)
        self.last_plan_seconds = time.perf_counter() - started
        self._metrics.plan_duration.record(self.last_plan_seconds)
        await self._report(
            target, desired.conflicts, desired.untranslatable, desired.clusters.values()
        )
        clusters = set(desired.clusters) | set(target.records.by_cluster)
        for cluster in sorted(clusters):
            cluster_plan = desired.clusters.get(cluster) or ClusterPlan(cluster)
            hosts = self._hosts_of(target.name, cluster)
            await target.applier.apply(cluster_plan, reread=reread, hosts=hosts)
            await self._put_report(target, cluster_plan, desired.conflicts)
        if target.fleet is not None:
            await target.fleet.cycle(own_members(self.index), self.placements, self.hosts)
        await target.reports.keep_only(clusters)
        target.applier.visit_only(clusters)
        self._lanes[target.name].completed += 1
        self.cycles += 1
        return desired

    def _hosts_of(self, vcenter: str, cluster: str) -> list[EsxiHost]:
        return [
            h for h in self.hosts.values() if h.vcenter == vcenter and h.cluster_moid == cluster
        ]

    async def _put_report(
        self, target: VCenterTarget, plan: ClusterPlan, conflicts: Sequence[Conflict]
    ) -> None:
        """What needs attention in the cluster after its apply (attention.py)."""
        applier, cluster = target.applier, plan.cluster_moid
        unprotected = unprotected_groups(
            plan,
            conflicts,
            applier.actual(cluster),
            applier.refused(cluster),
            applier.unowned.get(cluster, ()),
        )
        others = other_install_rules(applier.other_installs.get(cluster, ()))
        warnings = applier.shared_hosts.get(cluster, [])
        await target.reports.put(cluster, unprotected, others, warnings)

    async def _plan(self, target: VCenterTarget) -> Plan:
        """The plan, letting the loop run between its steps: informers, the Lease's renewal and
        the other vCenters' cycles wait for one step of it at most, never for the whole plan."""
        planning = Planning(
            self.index,
            self.placements,
            self.hosts,
            self.constrained.values(),
            target.settings,
            target.records.by_cluster,
        )
        for _ in planning.steps():
            await asyncio.sleep(0)
        return planning.result

    async def _report(
        self,
        target: VCenterTarget,
        conflicts: Iterable[Conflict],
        untranslatable: Iterable[Untranslatable],
        clusters: Iterable[ClusterPlan],
    ) -> None:
        """Bus event, metric and a Kubernetes Event on each pod, once per distinct problem; and
        a Kubernetes Event on each pod of a rule held for maintenance (its bus event and metric
        come from the applier, once vCenter took the hold)."""
        current: set[tuple[str, ...]] = set()
        lane = self._lanes[target.name]
        reported = lane.reported
        for cluster_plan in clusters:
            for name, hosts in sorted(cluster_plan.maintenance_holds.items()):
                rule = cluster_plan.objects[name]
                key = ("held", cluster_plan.cluster_moid, name, *hosts)
                current.add(key)
                if key not in reported:
                    message = f"DRS rule {name} {rule.held_because}"
                    await self._pod_events(rule.pods, "DrsRuleHeld", message)
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
        lane.reported = current

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
