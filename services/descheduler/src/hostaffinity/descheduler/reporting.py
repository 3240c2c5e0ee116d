"""What the descheduler tells the world about each action: a Kubernetes Event on the pod or VMI
naming the strategy and the rule (also on a pod that should move but no node could take), a
bus event (`pod.evicted`, `vmi.migration.requested`) for subscribers, and the metrics.
Reporting never holds an eviction up: bus events wait in the runtime's outbox, which publishes
them when NATS is there (kept, up to a bound, while it is away). Only the intent stored before
the call waits for NATS (intents.py): an outcome the outbox could not publish before a stop is
then finished by the next leader.
"""

from __future__ import annotations

from hostaffinity.descheduler.core.eviction_planner import Action, Outcome, Skip, VmiStays
from hostaffinity.descheduler.core.kubevirt import VirtualMachineInstanceMigration
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.executor import (
    BLOCKED,
    DRY_RUN,
    EVICTED,
    MIGRATED,
    NOT_MIGRATABLE,
    migration_name,
    write_path,
)
from hostaffinity.descheduler.intents import REQUESTED, Announcement, Intents
from hostaffinity.descheduler.metrics import DeschedulerMetrics
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.schema import EventFactory, PodEvicted, VmiMigrationRequested
from hostaffinity.schema.timestamps import utc_timestamp


class Reporter:
    """Events, bus messages and metrics for actions the executor carried out."""

    def __init__(
        self,
        events: EventRecorder,
        outbox: Outbox,
        intents: Intents,
        metrics: DeschedulerMetrics,
        event_factory: EventFactory,
    ) -> None:
        self._events = events
        self._event_factory = event_factory
        self._outbox = outbox
        self._intents = intents
        self._metrics = metrics
        self._migrations: dict[str, Action] = {}

    async def intend(self, action: Action) -> bool:
        """Store the attempt's intent on the bus before it is carried out (intents.py)."""
        return await self._intents.store(
            announcement(self._event_factory, action, REQUESTED, utc_timestamp())
        )

    async def action(self, action: Action, result: str) -> None:
        """The outcome on the bus first (the outbox keeps it), then the Kubernetes Event."""
        self._metrics.attempted(action.strategy, result)
        path = write_path(action)
        intent = self._intents.answered(action.uid)
        if intent is not None or result in (EVICTED, MIGRATED, DRY_RUN):
            self._outbox.put(announcement(self._event_factory, action, result, intent or ""))
        path.checkpoint("event-queued")
        namespace, name = action.pod.split("/", 1)
        about_pod = ObjectRef("Pod", name, action.uid, namespace)
        what = f"{action.strategy}: {action.rule}"
        if action.why:
            what += f"; chosen: {action.why}"
        if result == EVICTED:
            await self._events.record(about_pod, "Descheduled", f"Evicted by {what}", "Normal")
        elif result == BLOCKED:
            await self._events.record(
                about_pod,
                "EvictionBlocked",
                f"A PodDisruptionBudget refused the eviction ({what}); retrying later",
                "Normal",
            )
        elif result == MIGRATED:
            vmi_ns, vmi_name = action.vmi.split("/", 1)
            migration = migration_name(vmi_name, action.uid)
            self._migrations[f"{vmi_ns}/{migration}"] = action
            await self._events.record(
                ObjectRef("VirtualMachineInstance", vmi_name, "", vmi_ns, "kubevirt.io/v1"),
                "Migrating",
                f"Live migration {migration} requested by {what}; {_target(action)}",
                "Normal",
            )
        path.checkpoint("reported")

    async def stay(self, stay: VmiStays) -> None:
        """A VMI that should move but cannot live-migrate: a Warning Event on it."""
        namespace, name = stay.vmi.split("/", 1)
        self._metrics.attempted(stay.strategy, NOT_MIGRATABLE)
        await self._events.record(
            ObjectRef("VirtualMachineInstance", name, "", namespace, "kubevirt.io/v1"),
            "CannotLiveMigrate",
            f"{stay.strategy}: {stay.rule}; left in place: {stay.reason}",
        )

    async def left_alone(self, skip: Skip, state: ClusterState) -> None:
        """A pod a strategy wanted to move that node fit kept in place: a Warning Event on it
        (one series per pod and reason, so a cycle repeating it raises the Event's count)."""
        for key, why in skip.nowhere_to_go():
            pod = state.pods.get(key)
            if pod is None:
                continue
            await self._events.record(
                ObjectRef("Pod", pod.metadata.name, pod.metadata.uid, pod.metadata.namespace),
                "NotDescheduled",
                f"{skip.strategy}: {skip.rule}; left in place: {why}",
            )

    async def migration_changed(self, migration: VirtualMachineInstanceMigration) -> None:
        """Follow the migrations this descheduler created to Succeeded or Failed."""
        action = self._migrations.get(migration.key)
        if action is None or migration.in_flight:
            return
        del self._migrations[migration.key]
        phase = migration.status.phase
        self._metrics.migration_finished(phase.lower())
        if phase == "Failed":
            namespace, name = action.vmi.split("/", 1)
            await self._events.record(
                ObjectRef("VirtualMachineInstance", name, "", namespace, "kubevirt.io/v1"),
                "MigrationFailed",
                f"Live migration {migration.metadata.name} ({action.strategy}) failed; "
                "the next cycle decides again",
            )


def announcement(
    event_factory: EventFactory, action: Action, result: str, answers: str
) -> Announcement:
    """The bus event of an attempt's intent (`requested`, `answers` its time), or of what came
    of it (`answers` the intent's id; empty in a dry run). An eviction or a migration made has
    the id deterministic in the pod's uid, which a successor finishing the intent gives it too;
    every other answer names its intent."""
    made = result in (EVICTED, MIGRATED, DRY_RUN)
    id_parts = (action.uid, result, *(() if made else (answers,)))
    # What both announcements say of the action.
    said = {
        "pod": action.pod,
        "pod_uid": action.uid,
        "node": action.node,
        "strategy": action.strategy,
        "rule": action.rule,
        "result": result,
        "owner": action.workload,
    }
    if action.outcome is Outcome.EVICT:
        return event_factory.new(PodEvicted, *id_parts, **said)
    migration = migration_name(action.vmi.split("/", 1)[1], action.uid)
    return event_factory.new(
        VmiMigrationRequested, *id_parts, vmi=action.vmi, migration=migration, **said
    )


def _target(action: Action) -> str:
    """Where the VM goes: pinned, or KubeVirt's choice on a KubeVirt without addedNodeSelector."""
    if action.pinned_hostname:
        return f"target node {action.target} (addedNodeSelector)"
    version = action.kubevirt_version or "of unknown version"
    return (
        f"target chosen by kube-scheduler: KubeVirt {version} has no addedNodeSelector "
        f"(1.5 and later), node {action.target} was checked"
    )
