"""Pods kube-scheduler is placing: asked about by a filter, not yet reported bound by the informer.

kube-scheduler ends a pod's scheduling cycle by assuming it in its own cache and runs the binding
cycle in a goroutine, then filters the next pod at once (pkg/scheduler/schedule_one.go at v1.36:
`ScheduleOne` → `go func() { ... sched.runBindingCycle(...) }()`). Until the pod informer reports
the binding, the extender knows such a pod only from the requests it answered. Entries are
bounded: by count (the oldest goes first) and by age (a placement that never comes is dropped);
both are counted. A filter that must know where one of these pods went waits for it, bounded, by
`settled`.

Entries without a reservation are also kept by label (`by_label`): in a burst thousands of pods
are in flight, and a filter looks up the few its terms could select instead of testing them all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

import msgspec

from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.selectors import IN, Selector

K = TypeVar("K", bound=Hashable)


class InFlightPod(msgspec.Struct, frozen=True):
    """A pod between its filter and its binding; `node` is where it is reserved, if anywhere."""

    pod: Pod
    since: float
    node: str | None = None


class InFlight:
    """In-flight pods by key, oldest first."""

    def __init__(self, *, capacity: int, max_age_seconds: float, clock: Callable[[], float]):
        self._capacity = capacity
        self._max_age = max_age_seconds
        self._clock = clock
        self._entries: OrderedDict[str, InFlightPod] = OrderedDict()
        self._settled: dict[str, asyncio.Event] = {}
        # Unreserved entries: label pair -> keys, label key -> keys (see `unplaced_selectable`).
        self._by_pair: dict[tuple[str, str], set[str]] = {}
        self._by_key: dict[str, set[str]] = {}
        self._arrival: dict[str, int] = {}  # unreserved entries' order in `_entries`
        self._arrivals = 0
        self.evicted = 0  # dropped for room
        self.expired = 0  # dropped for age: the placement never came

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> InFlightPod | None:
        return self._entries.get(key)

    def note(self, pod: Pod, node: str | None = None) -> list[InFlightPod]:
        """Remember `pod` (again: it moves to the young end); returns the entries dropped."""
        key = pod.key
        if key in self._entries:
            self._unindex(key, self._entries.pop(key))
        self._entries[key] = InFlightPod(pod, self._clock(), node)
        if node is None:
            self._arrivals += 1
            self._arrival[key] = self._arrivals
            for pair in pod.metadata.labels.items():
                self._by_pair.setdefault(pair, set()).add(key)
                self._by_key.setdefault(pair[0], set()).add(key)
        dropped = self.expire()
        while len(self._entries) > self._capacity:
            dropped.append(self._drop(next(iter(self._entries))))
            self.evicted += 1
        return dropped

    def pop(self, key: str) -> InFlightPod | None:
        """The pod's placement is known (bound, deleted, unschedulable): forget it."""
        if key not in self._entries:
            return None
        return self._drop(key)

    def give_up(self, keys: list[str]) -> list[InFlightPod]:
        """Drop entries whose placement did not come within a filter's wait (counted expired)."""
        dropped = [self._drop(key) for key in keys if key in self._entries]
        self.expired += len(dropped)
        return dropped

    def expire(self) -> list[InFlightPod]:
        """Drop the entries older than the maximum age; returns them."""
        dropped: list[InFlightPod] = []
        oldest = self._clock() - self._max_age
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.since > oldest:
                break
            dropped.append(self._drop(key))
            self.expired += 1
        return dropped

    def unplaced(self) -> Iterator[InFlightPod]:
        """Entries without a reservation: pods no host-level term concerned when filtered."""
        return (entry for entry in self._entries.values() if entry.node is None)

    def unplaced_selectable(self, selectors: list[Selector]) -> list[InFlightPod]:
        """Entries without a reservation that one of `selectors` could select, oldest first:
        those carrying a selector's anchor label (every pod it matches does, see
        `Selector.anchor`). The caller still tests each one; this only skips the rest."""
        keys: set[str] = set()
        for selector in selectors:
            if selector.nothing:
                continue
            anchor = selector.anchor()
            if anchor is None:
                return list(self.unplaced())
            if anchor.op == IN:
                for value in anchor.values:
                    keys.update(self._by_pair.get((anchor.key, value), ()))
            else:
                keys.update(self._by_key.get(anchor.key, ()))
        return [self._entries[key] for key in sorted(keys, key=self._arrival.__getitem__)]

    async def settled(self, keys: list[str], within_seconds: float) -> list[str]:
        """Wait until none of `keys` is in flight, at most `within_seconds`; returns those still
        in flight then (the caller drops them: their placement did not come in time)."""
        waits = [self._settled.setdefault(key, asyncio.Event()) for key in keys if key in self]
        if waits:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_seconds):
                    await asyncio.gather(*(event.wait() for event in waits))
        return [key for key in keys if key in self]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def _drop(self, key: str) -> InFlightPod:
        entry = self._entries.pop(key)
        self._unindex(key, entry)
        event = self._settled.pop(key, None)
        if event is not None:
            event.set()
        return entry

    def _unindex(self, key: str, entry: InFlightPod) -> None:
        if entry.node is not None:
            return
        del self._arrival[key]
        for pair in entry.pod.metadata.labels.items():
            _discard(self._by_pair, pair, key)
            _discard(self._by_key, pair[0], key)


def _discard(index: dict[K, set[str]], bucket: K, key: str) -> None:
    """Take `key` out of its bucket (it is there: an unreserved entry is filed under each of its
    labels), dropping the bucket once empty so that labels seen once do not pile up."""
    keys = index[bucket]
    keys.remove(key)
    if not keys:
        del index[bucket]
