"""A new Lease holder inherits its predecessor's cooldowns from the events stream (a real
nats-server): the workloads that lost a pod, evicted or migrated, within the cooldown cool down;
older events, dry runs, refusals and events of releases without an owner do not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from hostaffinity.descheduler.cooldowns import inherit_cooldowns
from hostaffinity.descheduler.core.eviction_planner import EvictionPlanner, PlannerSettings
from hostaffinity.descheduler.core.policy import EvictionLimits
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import PodEvicted, VmiMigrationRequested, event_id, utc_timestamp

COOLDOWN_SECONDS = 300.0


def evicted(pod: str, owner: str, result: str, at: datetime) -> PodEvicted:
    return PodEvicted(
        id=event_id("pod.evicted", pod, result),
        occurred_at=utc_timestamp(at),
        source="descheduler",
        pod=f"default/{pod}",
        pod_uid=f"uid-{pod}",
        node="node-1",
        strategy="RemovePodsViolatingInterPodAntiAffinity",
        rule="r",
        result=result,
        owner=owner,
    )


def migrated(vmi: str, owner: str, result: str, at: datetime) -> VmiMigrationRequested:
    return VmiMigrationRequested(
        id=event_id("vmi.migration.requested", vmi, result),
        occurred_at=utc_timestamp(at),
        source="descheduler",
        vmi=f"default/{vmi}",
        migration=f"{vmi}-m",
        node="node-1",
        strategy="RemoveDuplicates",
        rule="r",
        result=result,
        owner=owner,
        pod_uid=f"uid-{vmi}",
    )


async def test_a_new_leader_cools_down_what_its_predecessor_evicted_within_the_cooldown(
    bus: Bus,
) -> None:
    await bus.provision()
    now = datetime.now(UTC)
    recent, old = now - timedelta(seconds=20), now - timedelta(seconds=COOLDOWN_SECONDS + 60)
    for event in (
        evicted("web-1", "default/ReplicaSet/web", "evicted", recent),
        evicted("api-1", "default/ReplicaSet/api", "evicted", old),
        evicted("db-1", "default/StatefulSet/db", "dry-run", recent),
        evicted("cache-1", "default/ReplicaSet/cache", "blocked", recent),
        evicted("legacy-1", "", "evicted", recent),
        migrated("vm-1", "default/VirtualMachinePool/pool", "migrated", recent),
        migrated("vm-2", "default/VirtualMachinePool/other", "dry-run", recent),
    ):
        await bus.publish_event(event)
    clock = [1_000.0]
    planner = EvictionPlanner(
        PlannerSettings(cooldown_seconds=COOLDOWN_SECONDS), EvictionLimits(), lambda: clock[0]
    )

    read = await inherit_cooldowns(bus.js, planner, COOLDOWN_SECONDS, now)

    assert read.inherited == 2
    cooling = {
        w
        for w in ("web", "api", "db", "cache", "pool", "other")
        if planner.cooling(f"default/ReplicaSet/{w}")
        or planner.cooling(f"default/StatefulSet/{w}")
        or planner.cooling(f"default/VirtualMachinePool/{w}")
    }
    assert cooling == {"web", "pool"}
    # The cooldown runs from the eviction, not from the takeover: 20 s of it are gone.
    clock[0] += COOLDOWN_SECONDS - 25
    assert planner.cooling("default/ReplicaSet/web")
    clock[0] += 10
    assert not planner.cooling("default/ReplicaSet/web")


async def test_an_empty_stream_leaves_every_cooldown_empty(bus: Bus) -> None:
    await bus.provision()
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    read = await inherit_cooldowns(bus.js, planner, COOLDOWN_SECONDS, datetime.now(UTC))
    assert (read.inherited, read.unanswered) == (0, [])


async def test_intents_nothing_answered_are_read_back(bus: Bus) -> None:
    """An intent answered by any result of the same pod (evicted, blocked, withdrawn, ...) is
    done; one without, or stored again after its answer (the next attempt), is left for the new
    leader to answer from what Kubernetes shows (intents.py)."""
    await bus.provision()
    now = datetime.now(UTC)
    recent = now - timedelta(seconds=20)

    def intent(pod: str, at: str) -> PodEvicted:
        event = evicted(pod, f"default/ReplicaSet/{pod}", "requested", recent)
        return msgspec.structs.replace(event, id=f"{event.id}-{at}")

    for event in (
        intent("web-1", "a"),
        evicted("web-1", "default/ReplicaSet/web-1", "evicted", recent),
        intent("api-1", "a"),
        intent("db-1", "a"),
        evicted("db-1", "default/ReplicaSet/db-1", "blocked", recent),
        intent("db-1", "b"),
        intent("cache-1", "a"),
        evicted("cache-1", "default/ReplicaSet/cache-1", "withdrawn", recent),
        migrated("vm-1", "default/VirtualMachinePool/pool", "requested", recent),
    ):
        await bus.publish_event(event)
    planner = EvictionPlanner(PlannerSettings(cooldown_seconds=COOLDOWN_SECONDS), EvictionLimits())

    read = await inherit_cooldowns(bus.js, planner, COOLDOWN_SECONDS, now)

    assert read.inherited == 1
    assert sorted(i.id for i in read.unanswered) == sorted(
        [
            intent("api-1", "a").id,
            intent("db-1", "b").id,
            event_id("vmi.migration.requested", "vm-1", "requested"),
        ]
    )
    assert not planner.cooling("default/ReplicaSet/api-1")  # an intent alone starts no cooldown
