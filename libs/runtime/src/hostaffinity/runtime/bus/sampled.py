"""Sampled events published off the request path: the lossy counterpart of the outbox.

The outbox (outbox.py) keeps every event until NATS has it; this is for the audit samples a
request handler offers (the extender's `extender.decision`, the webhook's `pod.mutated`), which
must never slow an answer down. An event is sampled by a key (a pod uid, an admission request
uid), so everything offered under one key appears together or not at all; it is built only once
sampled. Events wait in a bounded queue; when it is full, or NATS is away, they are dropped.
Both are counted as every publisher's are (outbox_metrics.py), under the publisher's name.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable

from hostaffinity.runtime.bus.outbox_metrics import OutboxInstruments
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.schema import Event

_log = logging.getLogger(__name__)


def sampled(key: str, ratio: float) -> bool:
    """Deterministic per key: the same key is always in or always out of the sample."""
    return zlib.crc32(key.encode()) < ratio * 2**32


class SampledPublisher:
    """Queues the sampled events; `run` publishes them until cancelled."""

    def __init__(
        self,
        name: str,
        publish: Callable[[Event], Awaitable[object]],
        *,
        ratio: float,
        capacity: int,
    ) -> None:
        self._publish = publish
        self._ratio = ratio
        self._queue: asyncio.Queue[Event] = asyncio.Queue(capacity)
        self._instruments = OutboxInstruments(name)

    def offer(self, key: str, build: Callable[[], Event]) -> None:
        """Queue the event `build` makes if `key` is sampled (built only then); drop it if the
        queue is full."""
        if not sampled(key, self._ratio):
            return
        try:
            self._queue.put_nowait(build())
        except asyncio.QueueFull:
            self._instruments.dropped()
        else:
            self._instruments.queued(1)

    async def run(self) -> None:
        while True:
            raise_if_cancel_requested()  # a publish below may have swallowed it (Python 3.11)
            event = await self._queue.get()
            try:
                await self._publish(event)
            except Exception as error:
                # nats raises its own error types (timeouts, no responders, connection closed).
                self._instruments.dropped()
                _log.warning("sampled event %s not published: %r", event.id, error)
            finally:
                self._instruments.queued(-1)
