"""One object for equal immutable values: what the replicas of a workload have in common.

The replicas of a workload carry the same affinity terms and topology spreads, so compiling them
per pod keeps a few hundred bytes of equal selectors, requirements and frozensets per pod (at
300,000 pods, most of the index's own memory). An `Interner` hands back the first of equal
values instead. It is bounded, least recently used first out, so a churning cluster cannot grow
it: a value it has dropped stays shared by the pods already holding it, and the next equal one
simply starts a new shared copy. The values must be immutable, or at least never changed by
anyone holding one: a holder can never tell a shared object from its own.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# Enough for the workloads whose pods arrive together (an informer lists pods by key, so a
# workload's replicas are adjacent), small enough to stay a few MiB whatever the cluster.
DEFAULT_CAPACITY: Final = 4096


class Interner(Generic[K, V]):
    """Equal keys, one value: the first value given for a key is handed out for it after.

    For a hashable immutable value the key is the value itself (`share(value, value)`); a dict
    is shared under a hashable form of its content.
    """

    __slots__ = ("_capacity", "_kept")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"an interner keeps at least one value, not {capacity}")
        self._capacity = capacity
        self._kept: OrderedDict[K, V] = OrderedDict()

    def share(self, key: K, value: V) -> V:
        """The value kept for `key`, else `value` (kept from now on)."""
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        if len(self._kept) >= self._capacity:
            self._kept.popitem(last=False)
        self._kept[key] = value
        return value

    def __len__(self) -> int:
        return len(self._kept)
