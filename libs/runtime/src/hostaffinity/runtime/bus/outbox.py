"""Bus events a service must not lose while NATS is away: kept in order, published when it is
back, and bounded so an outage costs memory only up to `capacity`.

Producers `put` and never wait: a reconcile, an eviction or a DRS batch is never held up by the
bus. `run` publishes the head event; while that fails it is retried with exponential backoff and
the rest wait behind it, so subscribers see the events in the order they happened. An event
whose id is already waiting is not queued again, and a publish retried after a lost ack is stored
once, because every event id is deterministic and goes out as JetStream's `Nats-Msg-Id`. When
the service stops (SIGTERM, Lease lost), what still waits gets `drain_seconds` to go out while
the bus is still open; what NATS does not take by then is logged as lost. A producer that may
still queue events while it unwinds (an eviction in flight finishing its report) runs under
`run_with`: it unwinds first, then the outbox drains, so what it queued last is not left behind.
Give the drain less than the runner's `drain_seconds`, which bounds the whole stop; an event it
cannot publish in time must be one that a successor can make again (the drs-translator keeps
its announcements in its bucket, the descheduler stores an intent first, the node-labeller keeps
its events in the topology bucket until published).

Metrics (outbox_metrics.py): `hostaffinity_bus_outbox_queued{outbox}` (events waiting) and
`hostaffinity_bus_outbox_dropped_total{outbox}` (the oldest, dropped at the bound).
"""

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from hostaffinity.runtime.bus.outbox_metrics import OutboxInstruments
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.schema import Event

_log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_SECONDS: Final = 5.0
Publish = Callable[[Event], Awaitable[object]]
# Told of each event NATS acknowledged, e.g. to drop a copy kept elsewhere until then.
Published = Callable[[Event], Awaitable[None]]


class Outbox:
    """Events waiting to be published, in order; `run` publishes them until cancelled."""

    def __init__(
        self,
        name: str,
        publish: Publish,
        *,
        capacity: int = 10_000,
        retry_base_seconds: float = 0.25,
        retry_max_seconds: float = 5.0,
        drain_seconds: float = 2.0,
        on_published: Published | None = None,
    ) -> None:
        self.name = name
        self.dropped = 0
        self._publish = publish
        self._capacity = capacity
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._drain_seconds = drain_seconds
        self._on_published = on_published
        self._waiting: collections.deque[Event] = collections.deque()
        self._ids: set[str] = set()
        self._ready = asyncio.Event()
        self._instruments = OutboxInstruments(name)

    def put(self, event: Event) -> None:
        """Queue `event` unless its id already waits; at the bound the oldest is dropped."""
        if event.id in self._ids:
            return
        if len(self._waiting) >= self._capacity:
            oldest = self._waiting.popleft()
            self._ids.discard(oldest.id)
            self.dropped += 1
            self._instruments.dropped()
            self._instruments.queued(-1)
            _log.warning("%s outbox full: dropped %s", self.name, oldest.id)
        self._waiting.append(event)
        self._ids.add(event.id)
        self._instruments.queued(1)
        self._ready.set()

    def __len__(self) -> int:
        return len(self._waiting)

    async def run(self) -> None:
        """Publish until cancelled; then, for at most `drain_seconds`, what still waits."""
        try:
            await self._publish_until_cancelled()
        finally:
            await self._drain()

    async def run_with(self, producer: Coroutine[Any, Any, None]) -> None:
        """`run` beside `producer`; cancelled, the producer unwinds first (queueing what it
        finishes meanwhile), then what waits is drained. Ends, raising, when the producer does."""
        publishing = asyncio.create_task(self._publish_until_cancelled(), name=self.name)
        try:
            await producer
        finally:
            publishing.cancel()
            await asyncio.wait({publishing})
            await self._drain()

    async def _publish_until_cancelled(self) -> None:
        while True:
            # The last publish may have swallowed a cancellation (3.11's `wait_for`, nats-py's
            # and ours): with nothing more to publish, nothing would end this wait.
            raise_if_cancel_requested()
            await self._ready.wait()
            failures = 0
            while self._waiting:
                raise_if_cancel_requested()  # nats-py's wait_for may have swallowed it (3.11)
                event = self._waiting[0]
                try:
                    await asyncio.wait_for(self._publish(event), PUBLISH_TIMEOUT_SECONDS)
                except Exception as error:  # nats-py's own errors while the server is away
                    raise_if_cancel_requested()
                    delay = min(self._retry_max, self._retry_base * 2**failures)
                    failures += 1
                    _log.warning(
                        "%s: could not publish %s yet (%r); retrying in %.2fs",
                        self.name,
                        event.id,
                        error,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                failures = 0
                await self._published(event)
            self._ready.clear()

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._drain_seconds
        while self._waiting and (left := deadline - loop.time()) > 0:
            event = self._waiting[0]
            try:
                # Not `wait_for`: on 3.11 it can swallow a cancellation that comes with the
                # result, and a drain told to stop must stop (cancellation.py).
                async with asyncio.timeout(min(left, PUBLISH_TIMEOUT_SECONDS)):
                    await self._publish(event)
            except Exception:  # NATS is away: no time left to wait for it
                break
            await self._published(event)
        if self._waiting:
            _log.warning(
                "%s: stopping with %d events not published, from %s",
                self.name,
                len(self._waiting),
                self._waiting[0].id,
            )

    async def _published(self, event: Event) -> None:
        """Done with the head event: `on_published` first, so a stop that interrupts it leaves
        the event at the head, published again by the drain (stored once: same id)."""
        if self._on_published is not None:
            try:
                await self._on_published(event)
            except Exception:  # the copy stays; sent again later, stored once (same id)
                _log.warning("%s: after publishing %s", self.name, event.id, exc_info=True)
        if self._waiting and self._waiting[0] is event:  # not dropped meanwhile
            self._waiting.popleft()
            self._ids.discard(event.id)
            self._instruments.queued(-1)
