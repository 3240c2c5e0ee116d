"""Which changes start a cycle, and the debounce that folds a burst into one."""

from __future__ import annotations

import asyncio
import json
from functools import reduce
from operator import or_

import pytest

from hostaffinity.descheduler.core import triggers
from hostaffinity.descheduler.core.strategies.changes import Change
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.descheduler.core.triggers import CycleTrigger, node_trigger, pod_trigger
from tests.platform.builders.descheduler import anti_affinity, node, pod

NOSCHED = {"key": "k", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, node("n1"), "added"),
        (node("n1", unschedulable=True), node("n1"), "uncordoned"),
        (node("n1", ready=False), node("n1"), "Ready"),
        (node("n1"), node("n1", taints=[NOSCHED]), "taints"),
        (node("n1"), node("n1", {"disk": "ssd"}), "labels"),
        (node("n1"), node("n1", unschedulable=True), None),
        (node("n1"), node("n1", ready=False), None),
        (node("n1"), node("n1"), None),
        (node("n1"), None, None),
    ],
    ids=[
        "added",
        "uncordoned",
        "ready",
        "tainted",
        "relabelled",
        "cordoned",
        "not-ready",
        "unchanged",
        "deleted",
    ],
)
def test_node_changes(old: object, new: object, expected: str | None) -> None:
    assert_reason(node_trigger(old, new), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, pod("p", "n1"), "assigned"),
        (pod("p", ""), pod("p", "n1"), "assigned"),
        (pod("p", "n1", {"a": "1"}), pod("p", "n1", {"a": "2"}), "labels"),
        (pod("p", "n1"), pod("p", "n1", affinity=anti_affinity({"a": "1"})), "affinity"),
        (pod("p", "n1"), pod("p", "n1", created_minutes_ago=5), None),
        (None, pod("p", ""), None),
        (pod("p", "n1"), None, None),
    ],
    ids=["new-assigned", "bound", "labels", "affinity", "status-only", "pending", "deleted"],
)
def test_pod_changes(old: object, new: object, expected: str | None) -> None:
    assert_reason(pod_trigger(old, new), expected)  # type: ignore[arg-type]


def test_every_change_is_registered_by_a_strategy_or_node_fit() -> None:
    assert reduce(or_, Change) == triggers.REGISTERED


def test_a_change_nobody_registered_for_starts_no_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triggers, "REGISTERED", Change.NODE_LABELS)
    assert node_trigger(node("n1"), node("n1", taints=[NOSCHED])) is None
    relabelled_and_tainted = node("n1", {"disk": "ssd"}, taints=[NOSCHED])
    assert_reason(node_trigger(node("n1"), relabelled_and_tainted), "labels")


def assert_reason(reason: str | None, expected: str | None) -> None:
    if expected is None:
        assert reason is None
    else:
        assert reason is not None
        assert expected in reason


async def test_a_burst_of_triggers_makes_one_cycle_after_the_debounce() -> None:
    trigger = CycleTrigger(debounce_s=0.1, interval_s=60)
    waiting = asyncio.create_task(trigger.next())
    trigger.poke("node n1 uncordoned")
    await asyncio.sleep(0.02)
    trigger.poke("node n2 uncordoned")
    triggered = await asyncio.wait_for(waiting, 1)
    assert triggered.reasons == ["node n1 uncordoned", "node n2 uncordoned"]


async def test_the_interval_runs_a_cycle_without_triggers() -> None:
    trigger = CycleTrigger(debounce_s=0.0, interval_s=0.05)
    assert (await asyncio.wait_for(trigger.next(), 1)).reasons == ["interval"]


async def test_a_flood_of_triggers_keeps_a_few_reasons_and_counts_the_rest() -> None:
    trigger = CycleTrigger(debounce_s=0.0, interval_s=60)
    for i in range(1000):
        trigger.poke(f"pod {i} assigned")
    reasons = (await asyncio.wait_for(trigger.next(), 1)).reasons
    assert len(reasons) == CycleTrigger.KEPT_REASONS + 1
    assert reasons[-1] == f"{1000 - CycleTrigger.KEPT_REASONS} more"


def test_vmi_and_migration_changes() -> None:
    from hostaffinity.descheduler.core.kubevirt import decode_migration, decode_vmi
    from hostaffinity.descheduler.core.triggers import migration_trigger, vmi_trigger
    from tests.platform.builders.descheduler import vmi, vmi_json

    edited = vmi_json("vm-a", "n1")
    edited["spec"]["affinity"] = anti_affinity({"app": "db"})
    assert vmi_trigger(vmi("vm-a", "n1"), decode_vmi(json.dumps(edited))) is not None
    assert vmi_trigger(vmi("vm-a", "n1"), vmi("vm-a", "n2")) is None
    assert vmi_trigger(None, vmi("vm-a", "n1")) is None

    def migration(phase: str) -> object:
        return decode_migration(
            json.dumps(
                {
                    "metadata": {"name": "m", "namespace": "default"},
                    "spec": {"vmiName": "vm-a"},
                    "status": {"phase": phase},
                }
            )
        )

    assert migration_trigger(migration("Running"), migration("Succeeded")) is not None  # type: ignore[arg-type]
    assert migration_trigger(migration("Succeeded"), migration("Succeeded")) is None  # type: ignore[arg-type]
    assert migration_trigger(None, migration("Running")) is None  # type: ignore[arg-type]


async def _triggered_after(trigger: CycleTrigger) -> triggers.Triggered:
    return await asyncio.wait_for(trigger.next(), 1)


async def test_changes_gathered_between_cycles_scope_the_next_one() -> None:
    trigger = CycleTrigger(debounce_s=0.0, interval_s=60)
    trigger.poke("state synced")
    assert (await _triggered_after(trigger)).scope is None  # the first cycle judges every pod
    deleted = pod("gone", "n3", {"app": "web"})
    trigger.note(Scope(pods={"default/gone"}, departed=[deleted]))
    trigger.poke("placement of n1 changed", Scope(nodes={"n1"}))
    trigger.poke("pod default/a assigned to n2", Scope(pods={"default/a"}))
    scope = (await _triggered_after(trigger)).scope
    assert scope is not None
    assert scope.nodes == {"n1"}
    assert scope.pods == {"default/a", "default/gone"}
    assert scope.departed == [deleted]
    # Gathered once: the cycle after starts from nothing.
    trigger.poke("placement of n2 changed", Scope(nodes={"n2"}))
    scope = (await _triggered_after(trigger)).scope
    assert scope is not None
    assert scope.nodes == {"n2"}
    assert not scope.pods


async def test_a_reason_without_changes_or_too_many_changes_judge_every_pod() -> None:
    trigger = CycleTrigger(debounce_s=0.0, interval_s=60)
    trigger.poke("state synced")
    await _triggered_after(trigger)
    trigger.poke("placement of n1 changed", Scope(nodes={"n1"}))
    trigger.poke("retry eviction of default/a (attempt 2)")  # the executor names no change
    assert (await _triggered_after(trigger)).scope is None
    for i in range(CycleTrigger.KEPT_CHANGES + 1):
        trigger.poke(f"pod default/p{i} assigned", Scope(pods={f"default/p{i}"}))
    assert (await _triggered_after(trigger)).scope is None


async def test_the_interval_judges_every_pod() -> None:
    trigger = CycleTrigger(debounce_s=0.0, interval_s=0.05)
    trigger.poke("state synced")
    await _triggered_after(trigger)
    trigger.note(Scope(pods={"default/gone"}))  # a deletion starts no cycle
    triggered = await _triggered_after(trigger)
    assert triggered.reasons == ["interval"]
    assert triggered.scope is None


async def test_changes_coming_faster_than_the_interval_do_not_put_off_the_full_cycle() -> None:
    trigger = CycleTrigger(debounce_s=0.0, interval_s=0.2)
    trigger.poke("state synced")
    await _triggered_after(trigger)
    scopes = []
    for i in range(8):  # a busy cluster: a pod assigned every 50 ms, never an idle interval
        await asyncio.sleep(0.05)
        trigger.poke(f"pod default/p{i} assigned", Scope(pods={f"default/p{i}"}))
        scopes.append(await _triggered_after(trigger))
    full = [t for t in scopes if t.scope is None]
    assert full, "no full cycle while changes kept coming"
    assert all("interval" in t.reasons for t in full)
    assert any(t.scope is not None for t in scopes)


async def test_a_stop_that_comes_with_a_poke_ends_the_wait() -> None:
    """The descheduler's loop waits here between cycles. A change and the stop in one step of
    the event loop once left the loop running past its drain bound (3.11's `wait_for` returned
    the poke and dropped the cancellation, python/cpython#86296)."""
    trigger = CycleTrigger(debounce_s=0.0, interval_s=60.0)
    waiting = asyncio.create_task(trigger.next())
    await asyncio.sleep(0.01)
    trigger.poke("pod deleted")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


def test_a_change_of_kubevirts_migration_limits_starts_a_cycle() -> None:
    """Raised from 0, the VMs it held back go; another change of the CR starts nothing."""
    from hostaffinity.descheduler.core.kubevirt import KubeVirt, decode_kubevirt
    from hostaffinity.descheduler.core.triggers import kubevirt_trigger
    from tests.platform.builders.descheduler import kubevirt_json

    def cr(version: str, per_cluster: int | None) -> KubeVirt:
        return decode_kubevirt(json.dumps(kubevirt_json(version, per_cluster=per_cluster)))

    assert kubevirt_trigger(cr("v1.6.0", 0), cr("v1.6.0", 1)) is not None
    assert kubevirt_trigger(cr("v1.6.0", None), cr("v1.6.0", 0)) is not None
    assert kubevirt_trigger(cr("v1.6.0", 0), cr("v1.6.1", 0)) is None
    assert kubevirt_trigger(None, cr("v1.6.0", 0)) is None
