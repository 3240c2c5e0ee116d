"""Carries out a plan: the only code that calls the Eviction API or creates migrations.

policy/v1 Eviction only (PodDisruptionBudgets hold): 201 is done; 429 means a budget said no
(or was not observed yet), so the pod is not evicted: after a backoff (the server's
`retryAfterSeconds` when it gives one) a cycle runs and decides about it again, against the
cluster as it is then; 404 means the pod is already gone. An API server that cannot be reached
(refused, reset, silent) decided nothing: the pod is `unreachable` and decided again the same way.
Calls run with bounded parallelism. In dry-run nothing is called and results are `dry-run`.
A virt-launcher pod is never evicted: its VMI gets a VirtualMachineInstanceMigration.

Each attempt stores its intent on the bus before the call (intents.py) and, once the call is
made, is finished and reported even when the service is stopping. Its steps are the write
paths' checkpoints (`EVICTION_PATH`, `MIGRATION_PATH`: test-only kill points, runtime
checkpoints.py): planned, intent-stored, called, then the reporter's event-queued and reported.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.descheduler.config import ExecutorSettings
from hostaffinity.descheduler.core.eviction_planner import (
    HOSTNAME_LABEL,
    Action,
    EvictionPlanner,
    Outcome,
    Plan,
    VmiStays,
)
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.runtime.kube.client import TRANSPORT_ERRORS, KubeClient, ResourceRef
from hostaffinity.runtime.kube.leader import LeaseLapsed, no_fence
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.process.checkpoints import WritePath

_log = logging.getLogger(__name__)
EVICTED: Final = "evicted"
MIGRATED: Final = "migrated"
DRY_RUN: Final = "dry-run"
BLOCKED: Final = "blocked"
GONE: Final = "gone"
UNREACHABLE: Final = "unreachable"
ERROR: Final = "error"
NOT_MIGRATABLE: Final = "not-migratable"  # a VMI that should move but cannot live-migrate
# Every result an attempt is counted under (metrics.py serves each at 0 from the start).
ATTEMPT_RESULTS: Final = (
    EVICTED, MIGRATED, DRY_RUN, BLOCKED, GONE, UNREACHABLE, ERROR, NOT_MIGRATABLE,
)  # fmt: skip
MANAGED_BY: Final = "hostaffinity-descheduler"
MIGRATIONS: Final = ResourceRef("kubevirt.io", "v1", "virtualmachineinstancemigrations")
# The steps of each write path, between its awaits (test-only kill points: runtime checkpoints).
STEPS: Final = ("planned", "intent-stored", "called", "event-queued", "reported")
EVICTION_PATH: Final = WritePath("eviction", STEPS)
MIGRATION_PATH: Final = WritePath("migration", STEPS)


def write_path(action: Action) -> WritePath:
    return MIGRATION_PATH if action.outcome is Outcome.MIGRATE else EVICTION_PATH


Report = Callable[[Action, str], Awaitable[None]]
# Stores the action's intent on the bus; False when NATS did not take it (intents.py).
Intend = Callable[[Action], Awaitable[bool]]
ReportStay = Callable[[VmiStays], Awaitable[None]]
Poke = Callable[[str], None]


class Executor:
    """Runs attempts from a queue with `parallelism` workers until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        planner: EvictionPlanner,
        settings: ExecutorSettings,
        intend: Intend,
        report: Report,
        report_stay: ReportStay,
        poke: Poke,
        *,
        ensure_leading: Callable[[], None] = no_fence,
    ) -> None:
        self._client = client
        # Checked right before each Eviction or migration is sent (runner.py).
        self._ensure_leading = ensure_leading
        self._state = state
        self._planner = planner
        self._settings = settings
        self._intend = intend
        self._report = report
        self._report_stay = report_stay
        self._poke = poke
        self._queue: asyncio.Queue[Action] = asyncio.Queue()
        self._timers: set[asyncio.TimerHandle] = set()
        self._busy = 0

    def idle(self) -> bool:
        """Nothing queued or running, and no retry waiting for its cycle."""
        return self._queue.empty() and not self._busy and not self._timers

    async def submit(self, plan: Plan) -> None:
        """Queue the plan's actions (dry-run: report them only) and report VMIs that stay."""
        for stay in plan.stays:
            await self._report_stay(stay)
        for action in plan.actions:
            if plan.dry_run:
                await self._report(action, DRY_RUN)
                continue
            self._planner.begin(action)
            self._queue.put_nowait(action)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, self._settings.parallelism)):
                    group.create_task(self._work())
        finally:
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()

    async def _work(self) -> None:
        while True:
            action = await self._queue.get()
            self._busy += 1
            try:
                await self._carry_out(action)
            except Exception:  # one failed call never stops the worker
                _log.exception("eviction of %s failed unexpectedly", action.pod)
                self._planner.give_up(action.pod)
            finally:
                self._planner.end(action.pod)
                self._busy -= 1

    async def _carry_out(self, action: Action) -> None:
        path = write_path(action)
        path.checkpoint("planned")
        current = self._state.pods.get(action.pod)
        if current is None or current.metadata.uid != action.uid:
            self._planner.give_up(action.pod)  # gone or replaced since the decision
            return
        if not await self._intend(action):  # NATS would not take the intent: not now
            self._retry_later(action, None)
            await self._report(action, UNREACHABLE)
            return
        path.checkpoint("intent-stored")
        raise_if_cancel_requested()  # a stop the intent's publish swallowed (3.11): no call
        # From the call on, a stop lets the attempt finish and report (within the runner's
        # drain): cut off in the middle, its outcome would be known only from the intent.
        attempt = asyncio.ensure_future(self._attempt(action, path))
        try:
            await asyncio.shield(attempt)
        except asyncio.CancelledError:
            await asyncio.wait({attempt})
            if not attempt.cancelled() and attempt.exception() is not None:
                _log.error("eviction of %s failed", action.pod, exc_info=attempt.exception())
            raise

    async def _attempt(self, action: Action, path: WritePath) -> None:
        """The call, then what came of it: retry, cooldown, report."""
        try:
            self._ensure_leading()
            if action.outcome is Outcome.MIGRATE:
                result, retry_after = await self._migrate(action), None
            else:
                result, retry_after = await self._evict(action)
        except LeaseLapsed as lapsed:  # the intent stays: the next leader withdraws it
            _log.warning("%s not sent: %s", action.pod, lapsed)
            return
        except TRANSPORT_ERRORS as error:
            _log.warning(
                "API server unreachable for %s (%r); deciding again later", action.pod, error
            )
            result, retry_after = UNREACHABLE, None
        path.checkpoint("called")
        if result in (BLOCKED, UNREACHABLE):
            self._retry_later(action, retry_after)
        else:
            self._planner.give_up(action.pod)
        if result in (EVICTED, MIGRATED):
            self._planner.record_evicted(action.workload)
        await self._report(action, result)

    def _retry_later(self, action: Action, retry_after: float | None) -> None:
        """Back off, then have a cycle decide about the pod again."""
        settings = self._settings
        attempt = self._planner.attempts(action.pod) + 1
        if attempt > settings.max_attempts:
            self._planner.give_up(action.pod)
            return
        backoff = settings.retry_initial_seconds * 2 ** (attempt - 1)
        delay = min(settings.retry_max_seconds, max(backoff, retry_after or 0.0))
        self._planner.retry_later(action.pod, delay, attempt)
        reason = f"retry eviction of {action.pod} (attempt {attempt + 1})"

        def fire() -> None:
            self._timers.discard(handle)
            self._poke(reason)

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers.add(handle)

    async def _evict(self, action: Action) -> tuple[str, float | None]:
        namespace, name = action.pod.split("/", 1)
        body: dict[str, object] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if self._settings.grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": self._settings.grace_period_seconds}
        path = ResourceRef("", "v1", "pods", namespace).path(name) + "/eviction"
        try:
            await self._client.request("POST", path, body=body)
        except ApiException as error:
            if error.status == 429:
                return BLOCKED, _retry_after(error)
            if error.status == 404:
                return GONE, None
            _log.warning("eviction of %s answered %s: %s", action.pod, error.status, error.body)
            return ERROR, None
        return EVICTED, None

    async def _migrate(self, action: Action) -> str:
        namespace, vmi_name = action.vmi.split("/", 1)
        name = migration_name(vmi_name, action.uid)
        spec: dict[str, Any] = {"vmiName": vmi_name}
        if action.pinned_hostname:  # KubeVirt >= 1.5: the target pod must be on this node
            spec["addedNodeSelector"] = {HOSTNAME_LABEL: action.pinned_hostname}
        body = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
                "annotations": {"hostaffinity.io/descheduler-strategy": action.strategy},
            },
            "spec": spec,
        }
        path = ResourceRef(MIGRATIONS.group, MIGRATIONS.version, MIGRATIONS.plural, namespace)
        try:
            await self._client.request("POST", path.path(), body=body)
        except ApiException as error:
            if error.status == 409:
                return MIGRATED  # this very migration exists already: it is under way
            if error.status == 404:
                return GONE
            _log.warning("migration of %s answered %s: %s", action.vmi, error.status, error.body)
            return ERROR
        return MIGRATED


def migration_name(vmi_name: str, pod_uid: str) -> str:
    """One migration per virt-launcher pod: a retry never creates a second one."""
    suffix = f"{zlib.crc32(pod_uid.encode()):08x}"
    return f"{vmi_name[: 63 - len(suffix) - 10]}-desched-{suffix}"


def _retry_after(error: ApiException) -> float | None:
    try:
        status = json.loads(error.body or b"{}")
        seconds = status.get("details", {}).get("retryAfterSeconds")
    except (ValueError, AttributeError):
        return None
    return float(seconds) if isinstance(seconds, int | float) else None
