"""WATCH: the initial events or the history from a resourceVersion, then live events and
BOOKMARKs, the 410 `ERROR` event for a compacted revision, and how an etcd without progress
notification fails (a part of KubeApiServer)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import admission, errors
from .reads import CONSISTENT_READ_WAIT_S, matcher
from .registry import bookmark_skeleton
from .request import TRUE, Request
from .selectors import Matcher
from .store import Change, Store, TooOld

if TYPE_CHECKING:
    from .faults import PatchHold

_BOOKMARK_EVERY_S = 60.0


class Watches:
    """The watch verb (a part of KubeApiServer)."""

    store: Store
    time_scale: float
    watch_progress: bool
    watch_holds: dict[str, PatchHold]
    closing: asyncio.Event  # set when the streams open now must end

    async def _watch(self, request: Request) -> web.StreamResponse:
        query = request.query
        matches = matcher(request)
        bookmarks = query.get("allowWatchBookmarks", "") in TRUE
        timeout = (
            float(query["timeoutSeconds"]) * self.time_scale
            if query.get("timeoutSeconds")
            else None
        )
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request.http)
        stream = _WatchStream(self, request, response, matches, bookmarks, timeout)
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            await stream.run()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response


class _WatchStream:
    """One open watch: initial events or history replay, then live events and bookmarks."""

    def __init__(
        self,
        server: Watches,
        request: Request,
        response: web.StreamResponse,
        matches: Matcher,
        bookmarks: bool,
        timeout: float | None,
    ) -> None:
        self.server = server
        self.request = request
        self.response = response
        self.matches = matches
        self.bookmarks = bookmarks
        self.deadline = time.monotonic() + timeout if timeout is not None else None

    async def send(self, event_type: str, obj: dict[str, Any]) -> None:
        line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")) + "\n"
        await self.response.write(line.encode())

    async def error(self, body: dict[str, Any]) -> None:
        await self.send("ERROR", body)

    async def run(self) -> None:
        server, query = self.server, self.request.query
        storage = self.request.route.resource.storage_key
        rv = query.get("resourceVersion", "")
        since = 0
        if rv in ("", "0"):
            if not server.watch_progress:
                await self._without_progress_notify(rv)
                if rv == "" or self.bookmarks:
                    return
            initial = [
                o
                for o in server.store.objects(storage, self.request.route.namespace)
                if self.matches(o)
            ]
            backlog, sub = server.store.subscribe(storage, server.store.rv)
            for obj in initial:
                await self.send("ADDED", self._present(obj))
            if self.bookmarks and server.watch_progress:
                await self.send("BOOKMARK", self._bookmark(initial_end=True))
        else:
            since = int(rv)
            try:
                backlog, sub = server.store.subscribe(storage, min(since, server.store.rv))
            except TooOld as exc:
                await self.error(
                    errors.status(
                        410, "Expired", f"too old resource version: {exc.requested} ({exc.oldest})"
                    ).body
                )
                return
        try:
            for change in backlog:
                await self._deliver(change, since)
            await self._live(sub.queue, since)
        finally:
            server.store.unsubscribe(sub)

    async def _without_progress_notify(self, rv: str) -> None:
        """etcd < 3.4.31 cannot confirm freshness: how v1.36 fails, as in 02 (etcd 3.4)."""
        if self.bookmarks:
            await self.error(
                errors.status(
                    500,
                    "InternalError",
                    "a watch stream was requested by the client but the "
                    "required storage feature RequestWatchProgress is disabled",
                ).body
            )
        elif rv == "":
            await asyncio.sleep(self._remaining(CONSISTENT_READ_WAIT_S * self.server.time_scale))
            current = self.server.store.rv
            await self.error(
                errors.status(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {current + 1}, current: {current}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                ).body
            )

    def _remaining(self, cap: float) -> float:
        if self.deadline is None:
            return cap
        return max(0.0, min(cap, self.deadline - time.monotonic()))

    def _next_bookmark(self) -> float | None:
        """Like the cacher: every minute, and 2 s before the deadline if that comes first."""
        if not self.bookmarks:
            return None
        now = time.monotonic()
        at = now + _BOOKMARK_EVERY_S * self.server.time_scale
        if self.deadline is not None:
            at = min(at, self.deadline - 2 * self.server.time_scale)
        return at if at > now else None

    async def _live(self, queue: asyncio.Queue[Change], since: int) -> None:
        closing = self.server.closing
        bookmark_at = self._next_bookmark()
        while not closing.is_set():
            wake = min((t for t in (self.deadline, bookmark_at) if t is not None), default=None)
            wait = None if wake is None else max(0.0, wake - time.monotonic())
            getter = asyncio.ensure_future(queue.get())
            closer = asyncio.ensure_future(closing.wait())
            done, _ = await asyncio.wait(
                {getter, closer}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            for task in (getter, closer):
                if task not in done:
                    task.cancel()
            if getter in done:
                hold = self.server.watch_holds.get(self.request.route.resource.storage_key)
                if hold is not None:  # changes queue up meanwhile, then go out back to back
                    hold.count += 1
                    hold.arrived.set()
                    await hold.released.wait()
                await self._deliver(getter.result(), since)
                continue
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                return
            if bookmark_at is not None and now >= bookmark_at:
                await self.send("BOOKMARK", self._bookmark(initial_end=False))
                bookmark_at = self._next_bookmark()

    async def _deliver(self, change: Change, since: int) -> None:
        if change.rv <= since:
            return
        new_match = change.type != "DELETED" and self.matches(change.obj)
        old_match = change.prev is not None and self.matches(change.prev)
        if new_match:
            await self.send("MODIFIED" if old_match else "ADDED", self._present(change.obj))
        elif old_match:
            await self.send("DELETED", self._present(change.obj))

    def _present(self, obj: dict[str, Any]) -> dict[str, Any]:
        return admission.present(self.request.route.resource, obj)

    def _bookmark(self, *, initial_end: bool) -> dict[str, Any]:
        """A skeleton of the kind carrying only the resourceVersion (plus Go zero values)."""
        resource = self.request.route.resource
        meta: dict[str, Any] = {"resourceVersion": str(self.server.store.rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {
            "kind": resource.kind,
            "apiVersion": resource.api_version,
            "metadata": meta,
            **bookmark_skeleton(resource.storage_key),
        }
