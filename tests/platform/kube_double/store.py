"""Objects, the global resourceVersion, and the event history watches replay from.

Like etcd behind the watch cache: every write takes the next revision; a bounded history of
events lets a watch (or an Exact LIST) start from an older revision until `compact()` forgets it.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Change:
    """One write, as a watch sees it."""

    rv: int
    storage: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    prev: dict[str, Any] | None


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
        self._history: list[Change] = []
        self._subscriptions: list[Subscription] = []

    def get(self, storage: str, key: Key) -> dict[str, Any] | None:
        obj = self._objects.get(storage, {}).get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, storage: str, namespace: str | None) -> list[dict[str, Any]]:
        objs = self._objects.get(storage, {})
        return [
            copy.deepcopy(objs[k]) for k in sorted(objs) if namespace is None or k[0] == namespace
        ]

    def objects_at(self, storage: str, namespace: str | None, rv: int) -> list[dict[str, Any]]:
        """The objects as they were at revision `rv`, rolled back through the history."""
        if rv < self.oldest_rv:
            raise TooOld(rv, self.oldest_rv)
        objs = dict(self._objects.get(storage, {}))
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.storage != storage:
                continue
            key = key_of(change.obj)
            if change.prev is None:
                objs.pop(key, None)
            else:
                objs[key] = change.prev
        return [
            copy.deepcopy(objs[k]) for k in sorted(objs) if namespace is None or k[0] == namespace
        ]

    def write(self, storage: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace `obj` at the next revision and tell the watchers."""
        key = key_of(obj)
        prev = self._objects.get(storage, {}).get(key)
        self.rv += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self._objects.setdefault(storage, {})[key] = stored
        self._record(
            Change(self.rv, storage, "ADDED" if prev is None else "MODIFIED", stored, prev)
        )
        return copy.deepcopy(stored)

    def delete(self, storage: str, key: Key) -> dict[str, Any]:
        prev = self._objects[storage].pop(key)
        self.rv += 1
        gone = copy.deepcopy(prev)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record(Change(self.rv, storage, "DELETED", gone, prev))
        return copy.deepcopy(gone)

    def _record(self, change: Change) -> None:
        self._history.append(change)
        if len(self._history) > self._history_limit:
            dropped = self._history.pop(0)
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
