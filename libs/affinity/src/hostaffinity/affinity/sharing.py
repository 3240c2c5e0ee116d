"""One object for equal immutable values: what the replicas of a workload have in common.

The replicas of a workload carry the same affinity terms and topology spreads, so compiling them
per pod keeps a few hundred bytes of equal selectors, requirements and frozensets per pod (at
300,000 pods, most of the index's own memory). An `Interner` hands back the first of equal
values instead. It is bounded, least recently used first out, so a churning cluster cannot grow
it: a value it has dropped stays shared by the pods already holding it, and the next equal one
simply starts a new shared copy. The values must be immutable, or at least never changed by
anyone holding one: a holder can never tell a shared object from its own.

`with_shared_fields` does the same for the fields of a freshly decoded API object (a decode
shares nothing between objects), by their JSON.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Final, Generic, Protocol, TypeVar

import msgspec

K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S", bound=msgspec.Struct)

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


_ENCODE: Final = msgspec.json.Encoder().encode
# One interner per (struct type, field): a fixed set, named by the callers' code.
_FIELDS: Final[dict[tuple[type, str], Interner[bytes, Any]]] = {}


def with_shared_fields(struct: S, fields: Iterable[str]) -> S:
    """`struct` with each of `fields` replaced by an equal value an earlier struct of its type
    holds, where one is kept: what a decoded object repeats from its workload's other replicas
    (labels, containers, affinity, spreads) is then held once, and its strings are interned.

    Equal means the same JSON, so nothing a reader sees changes; the dicts and lists handed out
    are shared, so no holder may change them (decoded API objects are read, never written).
    """
    changes: dict[str, Any] = {}
    for name in fields:
        value = getattr(struct, name)
        if value is None:
            continue
        if isinstance(value, str):
            kept = sys.intern(value)
        else:
            interner = _FIELDS.get((type(struct), name))
            if interner is None:
                interner = _FIELDS[type(struct), name] = Interner()
            kept = interner.share(_ENCODE(value), value)
        if kept is not value:
            changes[name] = kept
    return msgspec.structs.replace(struct, **changes) if changes else struct


class _ApiObject(Protocol):
    """A decoded Pod (the engine's or the descheduler's): what `with_shared_parts` reads."""

    @property
    def metadata(self) -> msgspec.Struct: ...
    @property
    def spec(self) -> msgspec.Struct: ...
    @property
    def status(self) -> msgspec.Struct: ...


P = TypeVar("P", bound=_ApiObject)


def with_shared_parts(pod: P, metadata: Iterable[str], spec: Iterable[str]) -> P:
    """A decoded pod with the named fields of its metadata and spec, and its phase, shared with
    its workload's other replicas (`with_shared_fields`)."""
    parts = {
        "metadata": with_shared_fields(pod.metadata, metadata),
        "spec": with_shared_fields(pod.spec, spec),
        "status": with_shared_fields(pod.status, ("phase",)),
    }
    assert isinstance(pod, msgspec.Struct)  # a decoded API object
    return msgspec.structs.replace(pod, **parts)
