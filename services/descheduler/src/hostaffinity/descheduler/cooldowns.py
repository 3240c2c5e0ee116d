"""The cooldowns a new Lease holder inherits: the evictions and migrations its predecessor made
within the cooldown, read back from the events stream, so that a change of leader never lets a
workload lose a second pod within its cooldown (the fault campaign's one-eviction-per-violation
invariant found a new leader doing just that right after taking over). The same read finds the
intents its predecessor stored and never answered (intents.py finishes them)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nats.js import JetStreamContext

from hostaffinity.descheduler.core.eviction_planner import EvictionPlanner
from hostaffinity.descheduler.executor import EVICTED, MIGRATED
from hostaffinity.descheduler.intents import REQUESTED, Announcement
from hostaffinity.runtime.bus.replay import replay
from hostaffinity.schema import (
    UNDECODABLE,
    PodEvicted,
    VmiMigrationRequested,
    decode_event,
    event_subject,
)

_log = logging.getLogger(__name__)
SUBJECTS = (event_subject("pod.evicted"), event_subject("vmi.migration.requested"))


@dataclass
class ReadBack:
    """What the events stream held of the last cooldown: how many evictions and migrations
    started a cooldown, and the intents nothing answered."""

    inherited: int = 0
    unanswered: list[Announcement] = field(default_factory=list)


async def inherit_cooldowns(
    js: JetStreamContext, planner: EvictionPlanner, cooldown_seconds: float, now: datetime
) -> ReadBack:
    """Start the cooldown of every workload the events stream says lost a pod (evicted or
    migrated) within `cooldown_seconds` before `now`; collect the intents of that time that
    nothing answered."""
    read = ReadBack()
    # By (type, pod uid), in stream order: the intent no answer has followed yet.
    open_intents: dict[tuple[type, str], Announcement] = {}
    async for message in replay(js, SUBJECTS, since=now - timedelta(seconds=cooldown_seconds)):
        try:
            event = decode_event(message.data)
        except UNDECODABLE:
            continue  # the CLI and the subscribers report it; a cooldown is not in it
        if not isinstance(event, PodEvicted | VmiMigrationRequested):
            continue
        if event.result == REQUESTED:
            open_intents[(type(event), event.pod_uid)] = event
            continue
        open_intents.pop((type(event), event.pod_uid), None)  # any other result answers it
        if event.result not in (EVICTED, MIGRATED) or not event.owner:
            continue
        # The stream starts at the time it stored a message; an outbox may have sent it later.
        ago = (now - datetime.fromisoformat(event.occurred_at)).total_seconds()
        if ago > cooldown_seconds:
            continue
        planner.record_evicted(event.owner, seconds_ago=max(0.0, ago))
        read.inherited += 1
    read.unanswered = list(open_intents.values())
    return read
