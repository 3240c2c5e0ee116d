"""Nothing the descheduler does goes unannounced: an intent on the bus before each eviction or
migration attempt, an answer after it, and a new leader that answers what its predecessor left.

Before the Eviction call (or the migration's creation) the executor stores the attempt's intent:
its `pod.evicted` (`vmi.migration.requested`) with result `requested`, acknowledged by NATS (no
ack in time: the pod is not touched and is decided again later). What came of it answers it
through the outbox: `evicted` (`migrated`), or `blocked`, `gone`, `error`, `unreachable`. A
descheduler killed between the two leaves an intent unanswered. The next leader reads the
cooldown's events back before its first cycle (cooldowns.py) and, once its state is synced,
answers each such intent from what Kubernetes shows: a pod gone or terminating was evicted, a
migration of the deterministic name exists; that outcome is published with the id the
predecessor would have given it (stored once however often it is sent) and the workload cools
down from the intent's time. Otherwise nothing was done: it answers `withdrawn`, so no later
leader takes the intent for an eviction when the pod goes for another reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Final

import msgspec

from hostaffinity.descheduler.core.eviction_planner import EvictionPlanner
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.executor import EVICTED, MIGRATED
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.schema import PodEvicted, VmiMigrationRequested, id_of

_log = logging.getLogger(__name__)
REQUESTED: Final = "requested"
WITHDRAWN: Final = "withdrawn"
# An intent NATS did not acknowledge within this is not acted on: the pod is tried again later.
STORE_TIMEOUT_SECONDS: Final = 5.0
Announcement = PodEvicted | VmiMigrationRequested
Publish = Callable[[Announcement], Awaitable[object]]


class Intents:
    """Stores each attempt's intent and remembers it, by pod uid, until its answer is made."""

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        # Pod uid → the id of the intent stored for its attempt in flight.
        self._open: dict[str, str] = {}

    async def store(self, intent: Announcement) -> bool:
        """Whether NATS acknowledged the intent in time."""
        try:
            async with asyncio.timeout(STORE_TIMEOUT_SECONDS):
                await self._publish(intent)
        except Exception as error:  # nats-py's errors, or the timeout, while NATS is away
            _log.warning("intent %s not stored (%r): not acting on it now", intent.id, error)
            return False
        self._open[intent.pod_uid] = intent.id
        return True

    def answered(self, pod_uid: str) -> str | None:
        """The id of the pod's stored intent, which the outcome about to be sent answers."""
        return self._open.pop(pod_uid, None)


def outcome_of(intent: Announcement) -> Announcement:
    """The outcome event the intent's action gets once carried out, with its deterministic id
    (the executor's report and a successor's finishing give the same)."""
    made = EVICTED if isinstance(intent, PodEvicted) else MIGRATED
    return msgspec.structs.replace(
        intent, id=id_of(type(intent), intent.pod_uid, made), result=made
    )


def carried_out(intent: Announcement, state: ClusterState) -> bool:
    """What Kubernetes shows of an unanswered intent: the pod gone (or replaced) or terminating;
    the migration of its name created."""
    if isinstance(intent, PodEvicted):
        pod = state.pods.get(intent.pod)
        return (
            pod is None
            or pod.metadata.uid != intent.pod_uid
            or pod.metadata.deletion_timestamp is not None
        )
    namespace = intent.vmi.split("/", 1)[0]
    return f"{namespace}/{intent.migration}" in state.migrations


def withdrawal_of(intent: Announcement) -> Announcement:
    """The answer to an intent nothing came of."""
    return msgspec.structs.replace(
        intent, id=id_of(type(intent), intent.pod_uid, WITHDRAWN, intent.id), result=WITHDRAWN
    )


def finish(
    unanswered: Iterable[Announcement],
    state: ClusterState,
    outbox: Outbox,
    planner: EvictionPlanner,
    now: datetime,
) -> int:
    """Answer each unanswered intent: announce the ones carried out and cool their workloads
    down (returns how many), withdraw the others. Runs once the state is synced, before the
    first cycle."""
    finished = 0
    for intent in unanswered:
        if not carried_out(intent, state):
            _log.info("%s was not carried out by the last leader: withdrawn", intent.id)
            outbox.put(withdrawal_of(intent))
            continue
        outcome = outcome_of(intent)
        _log.warning("announcing %s, carried out by the last leader unannounced", outcome.id)
        outbox.put(outcome)
        if intent.owner:
            ago = (now - datetime.fromisoformat(intent.occurred_at)).total_seconds()
            planner.record_evicted(intent.owner, seconds_ago=max(0.0, ago))
        finished += 1
    return finished
