"""When a cycle runs: on changes that can create or resolve violations, debounced, and on a
timer. Which changes count is declared by the strategies (their `triggers`) and by node fit
(NODE_FIT_TRIGGERS), not known here. The change tests are pure, so they are unit-tested without
informers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from hostaffinity.descheduler.core.eviction_planner import NODE_FIT_TRIGGERS
from hostaffinity.descheduler.core.kubevirt import (
    KubeVirt,
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
)
from hostaffinity.descheduler.core.model import DeschedulerNode, DeschedulerPod
from hostaffinity.descheduler.core.strategies import registered_triggers
from hostaffinity.descheduler.core.strategies.changes import Change
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.runtime.process.cancellation import wait_set

# What the registered plugins and node fit declared; nothing else starts a cycle.
REGISTERED: Final = registered_triggers() | NODE_FIT_TRIGGERS

Changes = Iterator[tuple[Change, str]]


def _if_registered(change: Change, reason: str) -> str | None:
    """The reason when some plugin (or node fit) registered for the change, else None."""
    return reason if change & REGISTERED else None


def _first_registered(changes: Changes) -> str | None:
    """The reason of the first change someone registered for, or None."""
    return next(filter(None, (_if_registered(change, reason) for change, reason in changes)), None)


def node_trigger(old: DeschedulerNode | None, new: DeschedulerNode | None) -> str | None:
    """Why a node change may let pods move (or break a rule), or None."""
    return None if new is None else _first_registered(_node_changes(old, new))


def _node_changes(old: DeschedulerNode | None, new: DeschedulerNode) -> Changes:
    name = new.metadata.name
    if old is None:
        yield Change.NODE_ADDED, f"node {name} added"
        return
    if old.spec.unschedulable and not new.spec.unschedulable:
        yield Change.NODE_UNCORDONED, f"node {name} uncordoned"
    if new.ready and not old.ready:
        yield Change.NODE_READY, f"node {name} Ready"
    if old.spec.taints != new.spec.taints:
        yield Change.NODE_TAINTS, f"node {name} taints changed"
    if old.metadata.labels != new.metadata.labels:
        yield Change.NODE_LABELS, f"node {name} labels changed"


def node_scope(name: str, _old: DeschedulerNode | None = None) -> Scope:
    """What a node change has the next cycle judge: the pods on it, whose domains, labels or
    taints changed (a removed node's pods stay indexed, without a domain, until deleted)."""
    return Scope(nodes={name})


def pod_trigger(old: DeschedulerPod | None, new: DeschedulerPod | None) -> str | None:
    """Why a pod change may create a violation, or None (deletions only ever resolve them)."""
    if new is None or not new.spec.node_name:
        return None
    return _first_registered(_pod_changes(old, new))


def _pod_changes(old: DeschedulerPod | None, new: DeschedulerPod) -> Changes:
    if old is None or old.spec.node_name != new.spec.node_name:
        yield Change.POD_ASSIGNED, f"pod {new.key} assigned to {new.spec.node_name}"
        return
    if old.metadata.labels != new.metadata.labels:
        yield Change.POD_LABELS, f"pod {new.key} labels changed"
    if old.spec.affinity != new.spec.affinity:
        yield Change.POD_AFFINITY, f"pod {new.key} affinity changed"


def pod_scope(key: str, old: DeschedulerPod | None) -> Scope:
    """What a pod change (or deletion) has the next cycle judge: the pod, and what it was
    before, which its partners may have relied on."""
    return Scope(pods={key}, departed=[] if old is None else [old])


def vmi_trigger(old: VirtualMachineInstance | None, new: VirtualMachineInstance) -> str | None:
    """A rule added to (or taken from) a running VM: its launcher pod is judged anew."""
    if old is None:
        return None
    if old.spec.affinity != new.spec.affinity or old.spec.node_selector != new.spec.node_selector:
        return _if_registered(Change.POD_AFFINITY, f"VMI {new.key} rules changed")
    return None


def migration_trigger(
    old: VirtualMachineInstanceMigration | None, new: VirtualMachineInstanceMigration
) -> str | None:
    """A migration finished: its slot under KubeVirt's limits is free again."""
    if new.in_flight or (old is not None and not old.in_flight):
        return None
    return _if_registered(Change.MIGRATION_FINISHED, f"migration {new.key} {new.status.phase}")


def kubevirt_trigger(old: KubeVirt | None, new: KubeVirt) -> str | None:
    """The KubeVirt CR's migration limits changed: VMs held back by the old ones (0 lets none
    run) are judged again now, not at the next interval."""
    limits = new.spec.configuration.migrations
    if old is None or old.spec.configuration.migrations == limits:
        return None
    return _if_registered(Change.MIGRATION_LIMITS, f"KubeVirt {new.key} migration limits changed")


@dataclass(frozen=True)
class Triggered:
    """Why a cycle runs, and what it judges: `scope` None for every pod (the first cycle, the
    interval, a reason that names no change), else the changes gathered since the last one."""

    reasons: list[str]
    scope: Scope | None


class CycleTrigger:
    """Collects reasons and the changes behind them; `next()` returns them one debounce window
    after the first one.

    Only the first `KEPT_REASONS` are kept word for word (an initial list of 150,000 pods pokes
    once per pod); the rest are counted. Past `KEPT_CHANGES` changed objects the next cycle is a
    full one anyway, so no more are kept."""

    KEPT_REASONS = 10
    KEPT_CHANGES = 10_000

    def __init__(self, debounce_s: float, interval_s: float) -> None:
        self._debounce = debounce_s
        self._interval = interval_s
        self._reasons: list[str] = []
        self._more = 0
        self._poked = asyncio.Event()
        # The changes since the last cycle; None: the next cycle judges every pod.
        self._scope: Scope | None = None
        self._last_full = time.monotonic()

    def poke(self, reason: str, changed: Scope | None = None) -> None:
        """A cycle should run; `changed` names what changed (None: judge every pod)."""
        if len(self._reasons) < self.KEPT_REASONS:
            self._reasons.append(reason)
        else:
            self._more += 1
        if changed is None:
            self._scope = None
        else:
            self.note(changed)
        self._poked.set()

    def note(self, changed: Scope) -> None:
        """A change that starts no cycle but that the next one judges (a pod deleted)."""
        if self._scope is None:
            return  # the next cycle judges every pod anyway
        self._scope.absorb(changed)
        if self._scope.size() > self.KEPT_CHANGES:
            self._scope = None

    async def next(self) -> Triggered:
        """Wait for a trigger (or the interval), then the debounce window; return the reasons
        and what the cycle judges."""
        await wait_set(self._poked, self._interval)
        if not self._poked.is_set():
            self._reasons.append("interval")
            self._scope = None
        await asyncio.sleep(self._debounce)
        reasons, self._reasons = self._reasons, []
        if self._more:
            reasons.append(f"{self._more} more")
            self._more = 0
        scope, self._scope = self._scope, Scope()
        self._poked.clear()
        now = time.monotonic()
        if scope is not None and now - self._last_full >= self._interval:
            # Changes that come faster than the interval must not put off the full cycle: what
            # no change names (a namespace relabelled, a node freed by a deletion) waits for it.
            reasons.append("interval")
            scope = None
        if scope is None:
            self._last_full = now
        return Triggered(reasons, scope)
