"""The informer every service runs: list, watch from the list's resourceVersion with bookmarks,
re-list when the server says the resourceVersion expired, and hand events to a handler in order
per object but in parallel across objects (the pattern of kopf's watching.py and queueing.py).

The real server reports an expired resourceVersion on a watch as HTTP 200 plus one `ERROR`
event with a Status of code 410 (see tests/fixtures/kube-apiserver/03-*); an HTTP 410 is
handled the same way. Objects are decoded from the raw JSON, one at a time, so one bad object is
logged and skipped instead of stopping the stream.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.kube.client import CALL_ERRORS, KubeClient, ResourceRef
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested

T = TypeVar("T")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
log = logging.getLogger(__name__)


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""


class _Object(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _WatchLine(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class InformerEvent(Generic[T]):
    """One change to one object; `key` is `namespace/name` (just `name` when cluster-scoped)."""

    type: EventType
    key: str
    obj: T


@dataclass(frozen=True)
class InformerSettings:
    """Paging and retry pacing; the defaults suit a 150,000-pod cluster. (How long a watch
    lasts is the client's `KubernetesSettings.watch_timeout_seconds`.)"""

    page_size: int = 500
    # Handlers running at once; events of one object always go to the same one, in order.
    shards: int = 64
    worker_idle_s: float = 5.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


class _Expired(Exception):
    """The resourceVersion we hold is gone from the server's history: list again."""


def _key(meta: _Meta) -> str:
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


class KeyedDispatcher(Generic[T]):
    """Events go to one of `shards` queues by a stable hash of their key, and one worker per
    shard handles its queue in order. So one object's events stay in order, objects in other
    shards run in parallel, and the task count stays at `shards` however many objects a list
    returns (150,000 pods must not mean 150,000 tasks). Idle workers exit."""

    def __init__(
        self,
        handler: Callable[[InformerEvent[T]], Awaitable[None]],
        shards: int,
        idle_s: float,
    ) -> None:
        self._handler = handler
        self._idle_s = idle_s
        self._queues: list[asyncio.Queue[InformerEvent[T]]] = [
            asyncio.Queue() for _ in range(shards)
        ]
        self._workers: dict[int, asyncio.Task[None]] = {}
        # Submitted and not yet handled: counted from submit to the handler's end, so an event a
        # worker has taken off its queue but not yet started still counts.
        self._unfinished = 0

    def submit(self, event: InformerEvent[T]) -> None:
        shard = zlib.crc32(event.key.encode()) % len(self._queues)
        self._queues[shard].put_nowait(event)
        self._unfinished += 1
        if shard not in self._workers:
            self._workers[shard] = asyncio.create_task(self._work(shard))

    async def _work(self, shard: int) -> None:
        queue = self._queues[shard]
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), self._idle_s)
            except TimeoutError:
                if queue.empty():  # nothing can arrive between this check and the removal
                    del self._workers[shard]
                    return
                continue
            try:
                await self._handler(event)
            except Exception:
                log.exception("handler failed for %s %s", event.type, event.key)
            finally:
                self._unfinished -= 1
            raise_if_cancel_requested()  # a handler's NATS call may have swallowed it

    def pending(self) -> int:
        """Events queued or being handled (for readiness, tests and metrics)."""
        return self._unfinished

    async def close(self) -> None:
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._workers.clear()


class Informer(Generic[T]):
    """Keeps `cache` equal to the server's view of one resource and reports every change."""

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceRef,
        handler: Callable[[InformerEvent[T]], Awaitable[None]],
        decode: Callable[[bytes], T],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        settings: InformerSettings | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._decode = decode
        self._selectors = {
            k: v
            for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if v
        }
        self.settings = settings or InformerSettings()
        self._dispatcher = KeyedDispatcher(
            handler, self.settings.shards, self.settings.worker_idle_s
        )
        self._cache: dict[str, T] = {}
        self.synced = asyncio.Event()
        self.relists = 0

    @property
    def cache(self) -> Mapping[str, T]:
        return self._cache

    def pending(self) -> int:
        return self._dispatcher.pending()

    def caught_up(self) -> bool:
        """The first list is in the cache and every event so far went through the handlers."""
        return self.synced.is_set() and self.pending() == 0

    async def run(self) -> None:
        """List and watch until cancelled, surviving expiries and transient failures."""
        delay = self.settings.backoff_initial_s
        try:
            while True:
                try:
                    rv = await self._relist()
                    delay = self.settings.backoff_initial_s
                    while True:
                        rv = await self._watch(rv)
                except _Expired:
                    log.info("resourceVersion expired for %s; listing again", self._resource)
                except CALL_ERRORS as exc:
                    log.warning(
                        "informer for %s failed (%s); retrying in %.1fs", self._resource, exc, delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.settings.backoff_max_s)
        finally:
            await self._dispatcher.close()

    async def list_once(self) -> Mapping[str, T]:
        """One paged LIST into the cache, no watch and no retry: a caller that wants an answer
        now (the CLI) hears of the first failure instead of waiting through retries."""
        try:
            await self._relist()
        finally:
            await self._dispatcher.close()
        return self._cache

    async def _relist(self) -> str:
        """A full paged LIST; the cache is replaced and the differences are emitted."""
        fresh: dict[str, T] = {}
        query = {**self._selectors, "limit": str(self.settings.page_size)}
        list_rv = ""
        while True:
            raw = await self._client.request("GET", self._resource.path(), query=query)
            page = msgspec.json.decode(raw, type=_List)
            list_rv = list_rv or page.metadata.resourceVersion
            for item in page.items:
                decoded = self._decode_item(item)
                if decoded is not None:
                    fresh[decoded[0]] = decoded[1]
            if not page.metadata.continue_:
                break
            query = {**query, "continue": page.metadata.continue_}
        self._replace(fresh)
        self.relists += 1
        self.synced.set()
        return list_rv

    def _replace(self, fresh: dict[str, T]) -> None:
        for key, obj in fresh.items():
            old = self._cache.get(key, None)
            if old is None:
                self._dispatcher.submit(InformerEvent("ADDED", key, obj))
            elif old != obj:
                self._dispatcher.submit(InformerEvent("MODIFIED", key, obj))
        for key in self._cache.keys() - fresh.keys():
            self._dispatcher.submit(InformerEvent("DELETED", key, self._cache[key]))
        self._cache = fresh

    def _decode_item(self, raw: msgspec.Raw) -> tuple[str, T] | None:
        try:
            meta = msgspec.json.decode(raw, type=_Object).metadata
            return _key(meta), self._decode(bytes(raw))
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            log.error("skipping an undecodable %s object: %s", self._resource.plural, exc)
            return None

    async def _watch(self, rv: str) -> str:
        """One watch request from `rv`; returns the resourceVersion to resume from."""
        query = {
            **self._selectors,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": rv,
        }
        try:
            async with self._client.stream(self._resource.path(), query) as lines:
                async for line in lines:
                    if line.strip():
                        rv = self._on_line(line, rv)
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired from exc
            raise
        return rv

    def _on_line(self, line: bytes, rv: str) -> str:
        try:
            event = msgspec.json.decode(line, type=_WatchLine)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("skipping an undecodable watch line: %s", exc)
            return rv
        if event.type == "ERROR":
            status = msgspec.json.decode(event.object, type=_Status)
            if status.code == 410:
                raise _Expired(status.message)
            raise ApiException(status=status.code, reason=f"{status.reason}: {status.message}")
        meta = msgspec.json.decode(event.object, type=_Object).metadata
        if event.type == "BOOKMARK":
            return meta.resourceVersion or rv
        decoded = self._decode_item(event.object)
        if decoded is not None:
            self._apply(event.type, *decoded)
        return meta.resourceVersion or rv

    def _apply(self, event_type: str, key: str, obj: T) -> None:
        if event_type == "DELETED":
            self._cache.pop(key, None)
            self._dispatcher.submit(InformerEvent("DELETED", key, obj))
        elif event_type in ("ADDED", "MODIFIED"):
            self._cache[key] = obj
            self._dispatcher.submit(InformerEvent(event_type, key, obj))  # type: ignore[arg-type]


def msgspec_decoder(type_: type[T]) -> Callable[[bytes], T]:
    """Decode objects into a msgspec Struct (unknown fields ignored), built once."""
    decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)
    return decoder.decode


def dict_decoder(raw: bytes) -> dict[str, Any]:
    """Decode objects as plain dicts."""
    value: dict[str, Any] = msgspec.json.decode(raw, type=dict[str, Any])
    return value


def upsert_or_remove(
    upsert: Callable[[T], None], remove: Callable[[str], None]
) -> Callable[[InformerEvent[T]], Awaitable[None]]:
    """A handler for a store kept by key: ADDED/MODIFIED upsert the object, DELETED removes it."""

    async def handle(event: InformerEvent[T]) -> None:
        if event.type == "DELETED":
            remove(event.key)
        else:
            upsert(event.obj)

    return handle
