"""Objects, the global resourceVersion, and the event history watches replay from.

Like etcd behind the watch cache: every write takes the next revision; a bounded history of
events lets a watch (or an Exact LIST) start from an older revision until `compact()` forgets it.
A LIST page is cut from the objects in etcd's key order without copying the rest, so a paged
list of 150,000 pods costs its pages, not 300 copies of the whole store.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

Key = tuple[str, str]  # (namespace or "", name)
_JSON = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder()


def json_copy(obj: Any) -> Any:
    """A deep copy of a JSON document (what every stored object is), several times faster than
    copy.deepcopy."""
    return _DECODE.decode(_JSON.encode(obj))


def list_key(key: Key) -> str:
    """Where an object sits in a LIST: etcd's key order, `<namespace>/<name>` or `<name>`."""
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


@dataclass(frozen=True)
class Page:
    """One page of a LIST: the objects (stored, not copied: render before the next await), the
    last one's list key, and how many objects in scope follow it (None when unknown: a
    selector filters them)."""

    objects: list[dict[str, Any]]
    more: bool
    last: str
    remaining: int | None


@dataclass(frozen=True)
class Change:
    """One write, as a watch sees it."""

    rv: int
    storage: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    prev: dict[str, Any] | None
    # When the write was committed (epoch seconds): a benchmark times a request's arrival by it.
    at: float = field(default_factory=time.time)


class TooOld(Exception):
    """The requested revision is older than the history still held."""

    def __init__(self, requested: int, oldest: int):
        super().__init__(requested, oldest)
        self.requested = requested
        self.oldest = oldest


@dataclass
class Subscription:
    storage: str
    queue: asyncio.Queue[Change] = field(default_factory=asyncio.Queue)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


class Store:
    """In-memory storage; callers hold no references into it (everything is copied)."""

    def __init__(self, history_limit: int = 10_000) -> None:
        self.rv = 1
        self.oldest_rv = 1
        self._history_limit = history_limit
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self._history: deque[Change] = deque()
        self._subscriptions: list[Subscription] = []
        # Per storage, its keys in list order; dropped when a key comes or goes.
        self._ordered: dict[str, list[tuple[str, Key]]] = {}

    def get(self, storage: str, key: Key) -> dict[str, Any] | None:
        obj = self._objects.get(storage, {}).get(key)
        return json_copy(obj) if obj is not None else None

    def objects(self, storage: str, namespace: str | None) -> list[dict[str, Any]]:
        objs = self._objects.get(storage, {})
        return [json_copy(objs[k]) for k in sorted(objs) if namespace is None or k[0] == namespace]

    def _at(self, storage: str, rv: int | None) -> dict[Key, dict[str, Any]]:
        """The objects (stored, not copied) at revision `rv` (None: now)."""
        current = self._objects.get(storage, {})
        if rv is None:
            return current
        if rv < self.oldest_rv:
            raise TooOld(rv, self.oldest_rv)
        objs: dict[Key, dict[str, Any]] | None = None
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.storage != storage:
                continue
            if objs is None:
                objs = dict(current)
            key = key_of(change.obj)
            if change.prev is None:
                objs.pop(key, None)
            else:
                objs[key] = change.prev
        return current if objs is None else objs

    def page(
        self,
        storage: str,
        namespace: str | None,
        rv: int | None,
        *,
        after: str,
        limit: int,
        matches: Callable[[dict[str, Any]], bool],
        counted: bool,
    ) -> Page:
        """The first `limit` objects (0: all) in scope from list key `after` on, at revision
        `rv` (None: now). `counted`: every object in scope matches, so what follows is
        counted."""
        objs = self._at(storage, rv)
        ordered = (
            self._order(storage)
            if objs is self._objects.get(storage)
            else sorted((list_key(k), k) for k in objs)
        )
        low, high = 0, len(ordered)
        if namespace is not None:
            low = bisect.bisect_left(ordered, (f"{namespace}/",))
            high = bisect.bisect_left(ordered, (f"{namespace}0",))  # "0" follows "/"
        # Continue keys are inclusive: `after` is the last key sent plus "\x00".
        start = max(low, bisect.bisect_left(ordered, (after,)))
        found: list[dict[str, Any]] = []
        last, more, position = "", False, start
        for position in range(start, high):
            name, key = ordered[position]
            obj = objs[key]
            if not matches(obj):
                continue
            if limit and len(found) == limit:
                more = True
                break
            found.append(obj)
            last = name
        remaining = high - position if more and counted else None
        return Page(found, more, last, remaining)

    def _order(self, storage: str) -> list[tuple[str, Key]]:
        ordered = self._ordered.get(storage)
        if ordered is None:
            ordered = sorted((list_key(k), k) for k in self._objects.get(storage, {}))
            self._ordered[storage] = ordered
        return ordered

    def write(self, storage: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace `obj` at the next revision and tell the watchers."""
        key = key_of(obj)
        prev = self._objects.get(storage, {}).get(key)
        self.rv += 1
        stored = json_copy(obj)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self._objects.setdefault(storage, {})[key] = stored
        if prev is None:
            self._ordered.pop(storage, None)
        self._record(
            Change(self.rv, storage, "ADDED" if prev is None else "MODIFIED", stored, prev)
        )
        return json_copy(stored)

    def delete(self, storage: str, key: Key) -> dict[str, Any]:
        prev = self._objects[storage].pop(key)
        self._ordered.pop(storage, None)
        self.rv += 1
        gone = json_copy(prev)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record(Change(self.rv, storage, "DELETED", gone, prev))
        return json_copy(gone)

    def _record(self, change: Change) -> None:
        self._history.append(change)
        if len(self._history) > self._history_limit:
            dropped = self._history.popleft()
            self.oldest_rv = dropped.rv
        for sub in self._subscriptions:
            if sub.storage == change.storage:
                sub.queue.put_nowait(change)

    def subscribe(self, storage: str, since: int) -> tuple[list[Change], Subscription]:
        """Changes after `since` still in history, plus a queue for the ones to come.

        No await happens between reading the backlog and registering, so nothing falls between.
        """
        if since < self.oldest_rv:
            raise TooOld(since, self.oldest_rv)
        backlog = [c for c in self._history if c.rv > since and c.storage == storage]
        sub = Subscription(storage)
        self._subscriptions.append(sub)
        return backlog, sub

    def watched(self) -> set[str]:
        """The storages a watch is open on now."""
        return {sub.storage for sub in self._subscriptions}

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscriptions.remove(sub)

    def compact(self) -> None:
        """Forget every past event: older revisions now answer 410 / `Expired`."""
        self._history.clear()
        self.oldest_rv = self.rv
