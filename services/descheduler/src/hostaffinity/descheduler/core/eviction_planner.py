"""The eviction planner: which candidate of each violation goes, and where it can go.

The only place that decides an eviction (descheduler's split, pkg/descheduler/evictions/
evictions.go): strategies hand over violations; here each one is checked against the
DefaultEvictor protections, the per-node / per-namespace / total limits of the cycle, the
workload's cooldown, KubeVirt's migration limits, and node fit. Node fit asks the engine in
kube-scheduler mode for the nodes that would take the pod, then requires a Ready node with room
for its requests (allocatable minus what is already requested there) where the violation would
not recur. A chosen pod is then *planned* onto that node in the draft's scratch
(ClusterState.scratch), so later decisions of the same cycle see it there: two pods never count
on the same free slot, and a pod that only has its own node (or places that would break the rule
again) is never evicted.

Everything here is synchronous: one cycle runs on the event loop without a pause, so no
informer event lands in the middle, and the draft closes its scratch (undoing the planned
moves) before the cycle returns, an exception included.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from hostaffinity.descheduler.config import DeschedulerSettings, MigrationLimits
from hostaffinity.descheduler.core.kubevirt import (
    MoveKind,
    how_to_move,
    launcher_vmi,
    migration_limits,
    pins_targets,
)
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.protections import Protections, node_selected
from hostaffinity.descheduler.core.state import ClusterState, Scratch
from hostaffinity.descheduler.core.strategies.base import Violation
from hostaffinity.descheduler.core.strategies.changes import Change

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
# Node fit's own triggers: changes that may give a pod somewhere to go, whatever the strategy.
NODE_FIT_TRIGGERS: Final = (
    Change.NODE_ADDED
    | Change.NODE_UNCORDONED
    | Change.NODE_READY
    | Change.NODE_TAINTS
    | Change.NODE_LABELS
    | Change.MIGRATION_FINISHED
    | Change.MIGRATION_LIMITS
)


# How every node-fit refusal starts: the pod would have nowhere to go (reported with an Event).
NO_PLACE: Final = "no other node"
# The planner's settings are the descheduler section's; where a caller names none (tests), its
# defaults.
_DEFAULTS = DeschedulerSettings()


class EvictionLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Per-cycle caps (the policy's maxNoOfPodsToEvictPer*; None: no cap)."""

    per_node: int | None = None
    per_namespace: int | None = None
    total: int | None = None


class PlannerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the planner enforces beyond the policy."""

    # A workload that lost a pod to the descheduler is left alone this long (loop guard).
    cooldown_seconds: float = _DEFAULTS.cooldown_seconds
    dry_run: bool = _DEFAULTS.dry_run
    # The VMI evictionStrategy assumed when a VMI names none (KubeVirt's cluster-wide setting).
    kubevirt_default_eviction_strategy: str = _DEFAULTS.kubevirt_default_eviction_strategy
    # Overrides the KubeVirt CR's migration limits when set.
    migrations: MigrationLimits | None = None


class Outcome(enum.Enum):
    EVICT = "evict"
    MIGRATE = "migrate"


@dataclass(frozen=True)
class Action:
    """One pod to move: evicted through the Eviction API, or its VMI live-migrated."""

    outcome: Outcome
    pod: str
    uid: str
    namespace: str
    node: str
    workload: str
    strategy: str
    rule: str
    why: str
    target: str
    vmi: str = ""
    # For a migration: the target's hostname label, pinned through addedNodeSelector where the
    # cluster's KubeVirt takes it; empty where kube-scheduler picks the target.
    pinned_hostname: str = ""
    kubevirt_version: str = ""


@dataclass(frozen=True)
class Skip:
    """A violation left alone this cycle, and why (per candidate)."""

    strategy: str
    rule: str
    reasons: tuple[tuple[str, str], ...]

    def nowhere_to_go(self) -> list[tuple[str, str]]:
        """(pod, why) for the candidates node fit refused: no other node could take them."""
        return [(pod, why) for pod, why in self.reasons if why.startswith(NO_PLACE)]


@dataclass(frozen=True)
class VmiStays:
    """A VM that should move but cannot live-migrate: reported with an Event."""

    vmi: str
    pod: str
    strategy: str
    rule: str
    reason: str


@dataclass
class Plan:
    """What one cycle decided."""

    actions: list[Action] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    stays: list[VmiStays] = field(default_factory=list)
    dry_run: bool = False


@dataclass(frozen=True)
class Retry:
    """A pod whose eviction a PodDisruptionBudget refused: decided again from `not_before`."""

    not_before: float
    attempts: int


class EvictionPlanner:
    """Long-lived: cooldowns, evictions in flight, and the pods waiting to be tried again.

    A refused eviction is not retried blindly: the pod is decided again by a later cycle (the
    rule may have been repaired, its target filled), which the cooldown does not hold back,
    since finishing what was decided is not a loop.
    """

    def __init__(
        self,
        settings: PlannerSettings,
        limits: EvictionLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.limits = limits
        self._clock = clock
        self._cooldown: dict[str, float] = {}
        # pod -> its workload, for every eviction or migration queued or under way
        self.in_progress: dict[str, str] = {}
        self.retrying: dict[str, Retry] = {}

    def begin(self, action: Action) -> None:
        """The action is handed to the executor: its pod and workload are being moved."""
        self.in_progress[action.pod] = action.workload

    def end(self, pod: str) -> None:
        """The executor is done with `pod`, whatever came of it."""
        self.in_progress.pop(pod, None)

    def record_evicted(self, workload: str, *, seconds_ago: float = 0.0) -> None:
        """An eviction or migration of this workload went through (`seconds_ago`: one an earlier
        Lease holder made): start its cooldown then, unless a later one already did."""
        at = self._clock() - seconds_ago
        self._cooldown[workload] = max(at, self._cooldown.get(workload, at))

    def attempts(self, pod: str) -> int:
        """How many evictions of `pod` were refused so far."""
        retry = self.retrying.get(pod)
        return 0 if retry is None else retry.attempts

    def retry_later(self, pod: str, delay: float, attempts: int) -> None:
        """Decide about `pod` again after `delay` seconds."""
        self.retrying[pod] = Retry(self._clock() + delay, attempts)

    def give_up(self, pod: str) -> None:
        """No more retries for `pod` (done, gone, or out of attempts)."""
        self.retrying.pop(pod, None)

    def now(self) -> float:
        return self._clock()

    def cooling(self, workload: str) -> bool:
        since = self._cooldown.get(workload)
        if since is None:
            return False
        if self._clock() - since >= self.settings.cooldown_seconds:
            del self._cooldown[workload]
            return False
        return True

    def draft(self, state: ClusterState, now: datetime) -> PlanDraft:
        """Start the plan of one cycle; finish() it before the state changes again (the state
        takes no pod event while a draft is open)."""
        return PlanDraft(self, state, now)


class PlanDraft:
    """The plan of one cycle while it is built: per-cycle counts, and the scratch holding the
    planned moves."""

    def __init__(self, planner: EvictionPlanner, state: ClusterState, now: datetime) -> None:
        self.planner = planner
        self.state = state
        self.now = now
        self.plan = Plan(dry_run=planner.settings.dry_run)
        self._chosen: set[str] = set()
        self._cooling: dict[str, bool] = {}
        # Workloads losing a pod to an eviction an earlier cycle decided, still under way: its
        # cooldown starts only once it went through, and this cycle's state does not show the
        # move yet (a pair sharing a host still looks broken, from the other pod's side). Their
        # violations wait for the cycle after. The moves of this cycle's own plan are in the
        # scratch instead, so one cycle may still move several pods of a workload (a spread).
        self._moving: set[str] = set(planner.in_progress.values())
        self._per_node: dict[str, int] = {}
        self._per_namespace: dict[str, int] = {}
        self._migrations_out: dict[str, int] = {}
        self._migrating_vmis: set[str] = set()
        for migration in state.migrations_in_flight():
            vmi = f"{migration.metadata.namespace}/{migration.spec.vmi_name}"
            self._migrating_vmis.add(vmi)
            state_of = migration.status.migration_state
            source = state_of.source_node if state_of else ""
            if not source:
                known = state.vmis.get(vmi)
                source = known.status.node_name if known else ""
            self._migrations_out[source] = self._migrations_out.get(source, 0) + 1
        self._migrations_total = len(self._migrating_vmis)
        self._cursor = 0
        self._nodes: list[str] | None = None
        self._clock_now = planner.now()
        self._scratch: Scratch = state.scratch()

    def resolve(self, violation: Violation, protections: Protections) -> Action | None:
        """Pick the first candidate that may go and has somewhere to go; plan its move."""
        if any(key in self._chosen for key in violation.candidates):
            return None  # an earlier decision this cycle already moves one of them
        reasons: list[tuple[str, str]] = []
        for key in violation.candidates:
            pod = self.state.pods.get(key)
            if pod is None:
                reasons.append((key, "pod is gone"))
                continue
            refusal = self._refuse(pod, protections)
            action = None
            if refusal is None:
                action, refusal = self._place(pod, violation, protections)
            if action is not None:
                if reasons:  # the preferred candidates could not go: say so instead
                    passed = "; ".join(f"{k} stays: {why}" for k, why in reasons)
                    action = dataclasses.replace(action, why=f"{key} chosen because {passed}")
                self._commit(action)
                return action
            reasons.append((key, refusal or "no reason"))
        self.plan.skipped.append(Skip(violation.strategy, violation.rule, tuple(reasons)))
        return None

    def finish(self) -> Plan:
        """Close the scratch (undoing the planned moves) and hand over the plan.

        A pod that was due for another try but was not chosen again no longer needs one (its
        rule holds now, or it cannot go): from here on it is decided like any other pod."""
        self._scratch.close()
        planner = self.planner
        for pod, retry in list(planner.retrying.items()):
            if retry.not_before <= self._clock_now and pod not in self._chosen:
                planner.give_up(pod)
        return self.plan

    # -- checks --------------------------------------------------------------------------------

    def _refuse(self, pod: DeschedulerPod, protections: Protections) -> str | None:
        planner, limits = self.planner, self.planner.limits
        if pod.key in planner.in_progress:
            return "an eviction of this pod is already under way"
        retry = planner.retrying.get(pod.key)
        if retry is not None and self._clock_now < retry.not_before:
            wait = retry.not_before - self._clock_now
            return f"a PodDisruptionBudget refused its eviction; trying again in {wait:.1f}s"
        refusal = protections.refuse(self.state, pod, self.now)
        if refusal is not None:
            return refusal
        workload = self.state.workload_of(pod)
        if workload in self._moving:
            return f"workload {workload} has an eviction under way"
        cooling = self._cooling.get(workload)
        if cooling is None:
            cooling = self._cooling[workload] = planner.cooling(workload)
        if cooling and retry is None:
            return f"workload {workload} is cooling down after an eviction"
        node, namespace = pod.spec.node_name, pod.metadata.namespace
        if limits.per_node is not None and self._per_node.get(node, 0) >= limits.per_node:
            return f"limit of {limits.per_node} evictions per node reached on {node}"
        if (
            limits.per_namespace is not None
            and self._per_namespace.get(namespace, 0) >= limits.per_namespace
        ):
            return f"limit of {limits.per_namespace} evictions per namespace reached in {namespace}"
        if limits.total is not None and len(self.plan.actions) >= limits.total:
            return f"limit of {limits.total} evictions per cycle reached"
        return None

    def _place(
        self, pod: DeschedulerPod, violation: Violation, protections: Protections
    ) -> tuple[Action | None, str | None]:
        vmi = launcher_vmi(pod)
        outcome, why = Outcome.EVICT, violation.why
        if vmi is not None:
            how, reason, refusal = self._vm_move(pod, vmi, violation)
            if refusal is not None:
                return None, refusal
            if how is MoveKind.MIGRATE:
                outcome = Outcome.MIGRATE
            else:  # a consented restart: the launcher pod is evicted like any pod
                why = f"{why}; VMI {vmi}: {reason}"
        target, refusal = self._target(pod, violation, protections)
        if target is None:
            return None, refusal
        action = Action(
            outcome=outcome,
            pod=pod.key,
            uid=pod.metadata.uid,
            namespace=pod.metadata.namespace,
            node=pod.spec.node_name,
            workload=self.state.workload_of(pod),
            strategy=violation.strategy,
            rule=violation.rule,
            why=why,
            target=target,
            vmi=vmi or "",
        )
        if outcome is Outcome.MIGRATE:
            action = self._pinned(action)
        return action, None

    def _pinned(self, action: Action) -> Action:
        """The migration pinned to its target where the cluster's KubeVirt allows it."""
        kubevirt = self.state.kubevirt
        version = kubevirt.status.observed_kube_virt_version if kubevirt else ""
        if not pins_targets(kubevirt):
            return dataclasses.replace(action, kubevirt_version=version)
        node = self.state.nodes.get(action.target)
        labels = node.metadata.labels if node is not None else {}
        hostname = labels.get(HOSTNAME_LABEL, action.target)
        return dataclasses.replace(action, pinned_hostname=hostname, kubevirt_version=version)

    def _vm_move(
        self, pod: DeschedulerPod, vmi: str, violation: Violation
    ) -> tuple[MoveKind, str, str | None]:
        """How the VM moves, why it cannot migrate (if so), and a refusal when it may not move
        this cycle: a VM that stays is reported; a migration keeps KubeVirt's limits."""
        settings = self.planner.settings
        how, reason = how_to_move(
            self.state.vmis.get(vmi), settings.kubevirt_default_eviction_strategy
        )
        if how is MoveKind.STAY:
            self.plan.stays.append(
                VmiStays(vmi, pod.key, violation.strategy, violation.rule, reason)
            )
            return how, reason, f"VMI {vmi} cannot live-migrate: {reason}"
        if how is MoveKind.RESTART:
            return how, reason, None
        if vmi in self._migrating_vmis:
            return how, reason, f"VMI {vmi} is already migrating"
        limits = migration_limits(self.state.kubevirt, settings.migrations)
        if limits.per_cluster == 0:
            return how, reason, "KubeVirt allows no live migration (a per-cluster limit of 0)"
        if self._migrations_total >= limits.per_cluster:
            refusal = f"limit of {limits.per_cluster} parallel migrations per cluster reached"
            return how, reason, refusal
        node = pod.spec.node_name
        if self._migrations_out.get(node, 0) >= limits.outbound_per_node:
            refusal = f"limit of {limits.outbound_per_node} outbound migrations reached on {node}"
            return how, reason, refusal
        return how, reason, None

    def _target(
        self, pod: DeschedulerPod, violation: Violation, protections: Protections
    ) -> tuple[str | None, str | None]:
        """The first node from the rotating cursor that the engine, the node's state and the
        violation accept; asked one node at a time, so a cycle's cost stays linear in the
        cluster. Only when none fits is every node filtered, to say why."""
        state, own = self.state, pod.spec.node_name

        def fits(node: str) -> bool:
            return node != own and self._shortage(pod, node, violation, protections) is None

        target = state.engine.first_fit(pod, self._rotation(), fits)
        if target is not None:
            self._cursor += 1
            return target, None
        result = state.engine.filter(pod)
        feasible = result.feasible
        if not feasible or feasible == [own]:
            return None, f"{NO_PLACE} can take it ({result.summary()})"
        shortages: dict[str, int] = {}
        for node in feasible:
            short = None if node == own else self._shortage(pod, node, violation, protections)
            if short is not None:
                shortages[short] = shortages.get(short, 0) + 1
        detail = ", ".join(f"{count} {why}" for why, count in sorted(shortages.items()))
        return None, f"{NO_PLACE} fits: {detail}"

    def _shortage(
        self, pod: DeschedulerPod, node: str, violation: Violation, protections: Protections
    ) -> str | None:
        """Why a node the engine accepts still cannot take the pod, or None when it can."""
        state = self.state
        record = state.nodes.get(node)
        if record is None or not record.ready:
            return "not Ready"
        if protections.node_selector and not node_selected(
            protections.node_selector, record.metadata.labels
        ):
            return "outside nodeSelector"
        short = state.fits_resources(pod.key, node)
        if short is not None:
            return f"insufficient {short}"
        if violation.improves is not None and not violation.improves(pod.key, node):
            return "would violate again"
        return None

    def _rotation(self) -> Iterator[str]:
        """Every node once, from a moving start, so planned moves spread instead of filling one
        node; the node list is read once per cycle (planned moves change pods, not nodes)."""
        if self._nodes is None:
            self._nodes = self.state.engine.index.node_names
        nodes, start = self._nodes, self._cursor
        count = len(nodes)
        for step in range(count):
            yield nodes[(start + step) % count]

    def _commit(self, action: Action) -> None:
        self._chosen.add(action.pod)
        self.plan.actions.append(action)
        self._per_node[action.node] = self._per_node.get(action.node, 0) + 1
        self._per_namespace[action.namespace] = self._per_namespace.get(action.namespace, 0) + 1
        if action.outcome is Outcome.MIGRATE:
            self._migrating_vmis.add(action.vmi)
            self._migrations_total += 1
            self._migrations_out[action.node] = self._migrations_out.get(action.node, 0) + 1
        self._scratch.move(action.pod, action.target)
