"""The drs-translator's kept announcements on a real nats-server: one key per vCenter whatever
the number of applies (a deleted key's marker stays for good in a bucket without a max age, so
a key per event grew the bucket by one key per apply: found by the campaign's soak), and what a
0.1.0 translator kept one key per event is sent by this one."""

import msgspec

from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import DRS_BUCKET, DrsRulesApplied

VCENTER = "vc.example.com"


def applied(number: int) -> DrsRulesApplied:
    return DrsRulesApplied(
        id=f"e{number}",
        occurred_at=f"2026-11-28T08:00:{number:02d}.000000Z",
        source="drs-translator",
        vcenter=VCENTER,
        cluster_moid="domain-c7",
        added=[f"hostaffinity-east-anti-{number:012d}"],
    )


async def keys_held(bus: Bus) -> int:
    """Every key the DRS bucket's stream holds a message for, delete markers included."""
    info = await bus.js.stream_info(f"KV_{DRS_BUCKET}", subjects_filter=">")
    return len(info.state.subjects or {})


async def test_many_applies_leave_one_key_per_vcenter(bus: Bus) -> None:
    kv = await bus.js.key_value(DRS_BUCKET)
    kept = KeptAnnouncements(kv, VCENTER)
    for number in range(20):
        await kept.keep(applied(number))
        await kept.keep(applied(100 + number))  # two batches in flight at once
        await kept.forget(applied(number))
        await kept.forget(applied(100 + number))
    assert await keys_held(bus) == 1
    assert await KeptAnnouncements(kv, VCENTER).load() == []


async def test_what_was_kept_and_not_forgotten_is_loaded_oldest_first(bus: Bus) -> None:
    kv = await bus.js.key_value(DRS_BUCKET)
    kept = KeptAnnouncements(kv, VCENTER)
    for number in (3, 1, 2):
        await kept.keep(applied(number))
    await kept.forget(applied(3))
    again = KeptAnnouncements(kv, VCENTER)
    assert [event.id for event in await again.load()] == ["e1", "e2"]
    await again.forget(applied(1))
    assert [event.id for event in await KeptAnnouncements(kv, VCENTER).load()] == ["e2"]


async def test_a_0_1_0_translator_s_kept_events_are_sent_and_moved_into_the_list(
    bus: Bus,
) -> None:
    kv = await bus.js.key_value(DRS_BUCKET)
    for number in (1, 2):  # 0.1.0: `outbox.<vcenter>.<event-id>`, one event each
        await kv.put(f"outbox.{VCENTER}.e{number}", msgspec.json.encode(applied(number)))
    await kv.put("outbox.node.worker-1", b"[]")  # the labeller's outbox: not ours
    kept = KeptAnnouncements(kv, VCENTER)
    assert [event.id for event in await kept.load()] == ["e1", "e2"]
    assert sorted(await kv.keys()) == ["outbox.drs.vc.example.com", "outbox.node.worker-1"]
    await kept.forget(applied(1))
    await kept.forget(applied(2))
    assert await KeptAnnouncements(kv, VCENTER).load() == []
