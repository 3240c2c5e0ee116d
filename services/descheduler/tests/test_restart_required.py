"""A VM whose template's placement waits for a restart is reported whichever of the VM and its
VMI the informers deliver first."""

from __future__ import annotations

from typing import Any

from hostaffinity.descheduler.restart_required import REASON, PlacementsAwaitingRestart
from tests.platform.builders.descheduler import cluster, node, vm, vmi

APART = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"app": "db"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}


class Recorded:
    """The Events a recorder would have written: (object name, reason)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def record(self, ref: Any, reason: str, message: str, **_: Any) -> None:
        self.events.append((ref.name, reason))


async def test_a_vm_seen_before_its_vmi_is_reported_when_the_vmi_arrives() -> None:
    state = cluster([node("worker-1")], [])
    recorded = Recorded()
    reporter = PlacementsAwaitingRestart(state, recorded)  # type: ignore[arg-type]
    changed = vm("db-0", template_affinity=APART, restart_required=True)
    state.upsert_vm(changed)
    await reporter.vm_changed(changed)  # no VMI yet: nothing to compare with
    assert recorded.events == []
    running = vmi("db-0", "worker-1", owner=("VirtualMachine", "db-0"))
    state.upsert_vmi(running)
    await reporter.vmi_changed(running)
    assert recorded.events == [("db-0", REASON)]
    await reporter.vmi_changed(running)  # once per VM and set of waiting fields
    assert recorded.events == [("db-0", REASON)]


async def test_a_vmi_without_a_vm_reports_nothing() -> None:
    state = cluster([node("worker-1")], [])
    recorded = Recorded()
    reporter = PlacementsAwaitingRestart(state, recorded)  # type: ignore[arg-type]
    alone = vmi("db-1", "worker-1")
    state.upsert_vmi(alone)
    await reporter.vmi_changed(alone)
    assert recorded.events == []
