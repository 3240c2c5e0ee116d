"""The cooldowns a new Lease holder inherits: the evictions and migrations its predecessor made
within the cooldown, read back from the events stream, so that a change of leader never lets a
workload lose a second pod within its cooldown (the fault campaign's one-eviction-per-violation
invariant found a new leader doing just that right after taking over)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from nats.js import JetStreamContext

from hostaffinity.descheduler.eviction_planner import EvictionPlanner
from hostaffinity.descheduler.executor import EVICTED, MIGRATED
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


async def inherit_cooldowns(
    js: JetStreamContext, planner: EvictionPlanner, cooldown_seconds: float, now: datetime
) -> int:
    """Start the cooldown of every workload the events stream says lost a pod (evicted or
    migrated) within `cooldown_seconds` before `now`; returns how many such events it read."""
    inherited = 0
    async for message in replay(js, SUBJECTS, since=now - timedelta(seconds=cooldown_seconds)):
        try:
            event = decode_event(message.data)
        except UNDECODABLE:
            continue  # the CLI and the subscribers report it; a cooldown is not in it
        match event:
            case PodEvicted(result=result, owner=owner) if result == EVICTED and owner:
                pass
            case VmiMigrationRequested(result=result, owner=owner) if result == MIGRATED and owner:
                pass
            case _:
                continue
        # The stream starts at the time it stored a message; an outbox may have sent it later.
        ago = (now - datetime.fromisoformat(event.occurred_at)).total_seconds()
        if ago > cooldown_seconds:
            continue
        planner.record_evicted(owner, seconds_ago=max(0.0, ago))
        inherited += 1
    return inherited
