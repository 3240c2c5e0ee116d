"""When a cycle runs: on changes that can create or resolve violations, debounced, and on a
timer. The change tests are pure, so they are unit-tested without informers.
"""

from __future__ import annotations

import asyncio
import contextlib

from hostaffinity.descheduler.kubevirt import (
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
)
from hostaffinity.descheduler.model import DeschedulerNode, DeschedulerPod


def node_trigger(old: DeschedulerNode | None, new: DeschedulerNode | None) -> str | None:
    """Why a node change may let pods move (or break a rule), or None."""
    if new is None:
        return None
    name = new.metadata.name
    if old is None:
        return f"node {name} added"
    if old.spec.unschedulable and not new.spec.unschedulable:
        return f"node {name} uncordoned"
    if new.ready and not old.ready:
        return f"node {name} Ready"
    if old.spec.taints != new.spec.taints:
        return f"node {name} taints changed"
    if old.metadata.labels != new.metadata.labels:
        return f"node {name} labels changed"
    return None


def pod_trigger(old: DeschedulerPod | None, new: DeschedulerPod | None) -> str | None:
    """Why a pod change may create a violation, or None (deletions only ever resolve them)."""
    if new is None or not new.spec.node_name:
        return None
    if old is None or old.spec.node_name != new.spec.node_name:
        return f"pod {new.key} assigned to {new.spec.node_name}"
    if old.metadata.labels != new.metadata.labels:
        return f"pod {new.key} labels changed"
    if old.spec.affinity != new.spec.affinity:
        return f"pod {new.key} affinity changed"
    return None


def vmi_trigger(old: VirtualMachineInstance | None, new: VirtualMachineInstance) -> str | None:
    """A rule added to (or taken from) a running VM: its launcher pod is judged anew."""
    if old is None:
        return None
    if old.spec.affinity != new.spec.affinity or old.spec.node_selector != new.spec.node_selector:
        return f"VMI {new.key} rules changed"
    return None


def migration_trigger(
    old: VirtualMachineInstanceMigration | None, new: VirtualMachineInstanceMigration
) -> str | None:
    """A migration finished: its slot under KubeVirt's limits is free again."""
    if new.in_flight or (old is not None and not old.in_flight):
        return None
    return f"migration {new.key} {new.status.phase}"


class CycleTrigger:
    """Collects reasons; `next()` returns them one debounce window after the first one.

    Only the first `KEPT_REASONS` are kept word for word (an initial list of 150,000 pods pokes
    once per pod); the rest are counted."""

    KEPT_REASONS = 10

    def __init__(self, debounce_s: float, interval_s: float) -> None:
        self._debounce = debounce_s
        self._interval = interval_s
        self._reasons: list[str] = []
        self._more = 0
        self._poked = asyncio.Event()

    def poke(self, reason: str) -> None:
        if len(self._reasons) < self.KEPT_REASONS:
            self._reasons.append(reason)
        else:
            self._more += 1
        self._poked.set()

    async def next(self) -> list[str]:
        """Wait for a trigger (or the interval), then the debounce window; return the reasons."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._poked.wait(), self._interval)
        if not self._poked.is_set():
            self._reasons.append("interval")
        await asyncio.sleep(self._debounce)
        reasons, self._reasons = self._reasons, []
        if self._more:
            reasons.append(f"{self._more} more")
            self._more = 0
        self._poked.clear()
        return reasons
