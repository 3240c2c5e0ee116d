"""A controller work queue: what a service must converge, keyed by object, retried until done.

The semantics are client-go's (k8s.io/client-go/util/workqueue, v1.36: queue.go,
delaying_queue.go, rate_limiting_queue.go, default_rate_limiters.go):
- a key added while it is already queued is queued once (the `dirty` set);
- a key added while a worker handles it is handled again after that worker is done, never by
  two workers at once (the `processing` set), so one object's writes stay in order;
- a failed key comes back after a per-key exponential backoff (`base_delay * 2**failures`, at
  most `max_delay`: ItemExponentialFailureRateLimiter); success forgets its failures;
- a plain `add` is not delayed by a pending retry: a changed desired state is worked on at once.

Ours: `sweep` queues a whole resync's keys a window at a time, so a key `add`ed meanwhile (a
change) waits behind at most `SWEEP_WINDOW` of them, not behind all of them.

The handler always reads the *current* desired state, so a retry never applies a stale one:
the key is the unit of work, not the change that queued it.
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

from opentelemetry import metrics

from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)
# A sweep's keys put in line at most this many at a time (beyond the workers' share).
SWEEP_WINDOW = 64
_retries = metrics.get_meter("hostaffinity.runtime").create_counter(
    "hostaffinity_workqueue_retries",
    description="keys handed back to a work queue after a failure, by queue",
)


class WorkQueue(Generic[K]):
    """Keys to work on; `run` hands them to workers until cancelled."""

    def __init__(self, name: str, *, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.name = name
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._ready: asyncio.Queue[K] = asyncio.Queue()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._failures: dict[K, int] = {}
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        # A sweep's keys not in line yet, in order, each once.
        self._swept: OrderedDict[K, None] = OrderedDict()
        # Exported at 0 from the start: rate() then sees the first retry.
        _retries.add(0, {"queue": name})

    def add(self, key: K) -> None:
        """Queue `key` now (once, however often it is added before a worker takes it)."""
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.put_nowait(key)

    def sweep(self, keys: Iterable[K]) -> None:
        """Queue every key, a window at a time: each joins the line once fewer than
        `SWEEP_WINDOW` keys wait in it, so keys `add`ed meanwhile go before the rest."""
        self._swept.update((key, None) for key in keys)
        self._refill()

    def _refill(self) -> None:
        while self._swept and self._ready.qsize() < SWEEP_WINDOW:
            self.add(self._swept.popitem(last=False)[0])

    def add_rate_limited(self, key: K) -> float:
        """Queue `key` again after its backoff; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay: float = min(self._base_delay * 2.0**failures, self._max_delay)
        self.add_after(key, delay)
        return delay

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds; an earlier pending time for it is kept."""
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._waiting.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._waiting[key] = (due, loop.call_at(due, self._due, key))

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff from the beginning."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def idle(self) -> bool:
        """Nothing queued, swept, being worked on or waiting for a retry."""
        return not (self._dirty or self._swept or self._processing or self._waiting)

    async def get(self) -> K:
        """The next key; the caller must call `done(key)` when it has finished with it."""
        key = await self._ready.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:  # added again while it was being worked on
            self._ready.put_nowait(key)
        self._refill()

    async def run(self, handler: Callable[[K], Awaitable[None]], workers: int) -> None:
        """Hand keys to `workers` concurrent handlers until cancelled; a handler that raises
        gets its key back after the backoff."""
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(workers):
                    group.create_task(self._work(handler))
        finally:
            for _, timer in self._waiting.values():
                timer.cancel()
            self._waiting.clear()

    async def _work(self, handler: Callable[[K], Awaitable[None]]) -> None:
        while True:
            key = await self.get()
            try:
                await handler(key)
            except Exception as error:  # one key's failure must not stop the others
                delay = self.add_rate_limited(key)
                _retries.add(1, {"queue": self.name})
                log.warning(
                    "%s: %s failed (%r); retry %d in %.2fs",
                    self.name,
                    key,
                    error,
                    self._failures[key],
                    delay,
                )
            else:
                self.forget(key)
            finally:
                self.done(key)
            raise_if_cancel_requested()  # a handler's NATS call may have swallowed it
            # A handler with nothing to write never suspends, and a ready queue's get does not
            # either: without this, a sweep of thousands of keys held the event loop for seconds
            # and a change arriving meanwhile could not even be queued.
            await asyncio.sleep(0)

    def _due(self, key: K) -> None:
        del self._waiting[key]
        self.add(key)
