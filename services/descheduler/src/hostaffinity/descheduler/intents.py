"""Nothing the descheduler does goes unannounced: an intent on the bus before each eviction or
migration, and a new leader that finishes what its predecessor left.

Before the Eviction call (or the migration's creation) the executor stores the action's intent:
its `pod.evicted` (`vmi.migration.requested`) with result `requested`, acknowledged by NATS (no
ack in time: the pod is not touched and is decided again later). The outcome follows through the
outbox. A descheduler killed between the call and the outcome's publication leaves an intent
without an outcome. The next leader reads the cooldown's events back before its first cycle
(cooldowns.py) and, once its state is synced, finishes each such intent from what Kubernetes
shows: a pod gone or terminating was evicted, a migration of the deterministic name exists; the
outcome is published with the id the predecessor would have given it (stored once however
often it is sent) and the workload cools down from the intent's time. A pod still running was
not evicted: the intent stays unanswered and the pod is decided like any other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Final

import msgspec

from hostaffinity.descheduler.eviction_planner import EvictionPlanner
from hostaffinity.descheduler.executor import EVICTED, MIGRATED
from hostaffinity.descheduler.state import ClusterState
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.schema import PodEvicted, VmiMigrationRequested, event_id

_log = logging.getLogger(__name__)
REQUESTED: Final = "requested"
# An intent NATS did not acknowledge within this is not acted on: the pod is tried again later.
STORE_TIMEOUT_SECONDS: Final = 5.0
Announcement = PodEvicted | VmiMigrationRequested
Publish = Callable[[Announcement], Awaitable[object]]


class Intents:
    """Stores intents (once per id) and finishes a predecessor's unanswered ones."""

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        # Intents known to be on the stream: stored by this leader or read back.
        self._stored: set[str] = set()

    def known(self, intents: Iterable[Announcement]) -> None:
        """Intents read back from the stream: an attempt on the same pod stores none again."""
        self._stored.update(intent.id for intent in intents)

    async def store(self, intent: Announcement) -> bool:
        """Whether the intent is on the stream (NATS acknowledged it now or earlier)."""
        if intent.id in self._stored:
            return True
        try:
            async with asyncio.timeout(STORE_TIMEOUT_SECONDS):
                await self._publish(intent)
        except Exception as error:  # nats-py's errors, or the timeout, while NATS is away
            _log.warning("intent %s not stored (%r): not acting on it now", intent.id, error)
            return False
        self._stored.add(intent.id)
        return True


def outcome_of(intent: Announcement) -> Announcement:
    """The outcome event the intent's action gets once carried out, with its deterministic id
    (the executor's report and a successor's finishing give the same)."""
    if isinstance(intent, PodEvicted):
        return msgspec.structs.replace(
            intent, id=event_id("pod.evicted", intent.pod_uid, EVICTED), result=EVICTED
        )
    return msgspec.structs.replace(
        intent,
        id=event_id("vmi.migration.requested", intent.pod_uid, MIGRATED),
        result=MIGRATED,
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


def finish(
    unanswered: Iterable[Announcement],
    state: ClusterState,
    outbox: Outbox,
    planner: EvictionPlanner,
    now: datetime,
) -> int:
    """Announce each unanswered intent that was carried out and cool its workload down;
    returns how many. Runs once the state is synced, before the first cycle."""
    finished = 0
    for intent in unanswered:
        if not carried_out(intent, state):
            _log.info("%s was not carried out by the last leader; deciding it again", intent.id)
            continue
        outcome = outcome_of(intent)
        _log.warning("announcing %s, carried out by the last leader unannounced", outcome.id)
        outbox.put(outcome)
        if intent.owner:
            ago = (now - datetime.fromisoformat(intent.occurred_at)).total_seconds()
            planner.record_evicted(intent.owner, seconds_ago=max(0.0, ago))
        finished += 1
    return finished
