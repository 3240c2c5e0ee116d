"""A cancellation made to land in the same event-loop turns as what the task awaits: a reply
arriving on a socket, or a timeout coming due. That is when Python 3.11's `asyncio.wait_for`
returns the result and drops the cancellation (python/cpython#86296, fixed in 3.12); the audit
in docs/reliability.md ("Cancellation under Python 3.11") is made of these sweeps.

`sweep` runs the operation once per offset. Each time, once the operation is under way
(`settle_turns` loop turns, then `settle_seconds`, after it started), one callback blocks the
loop for `hold` seconds: meanwhile a reply from another process reaches the socket and any
timer of the operation comes due, so they are all handled in the first turns after the block.
The task is cancelled `turns` turns after the block, for every `turns` in `range(offsets)`:
whatever takes several turns to pass a reply on (nats-py's reader task, aiohttp's protocol and
payload, a future's callbacks) meets the cancellation in one of them. A mechanism that never
drops one is CANCELLED or FINISHED_FIRST at every offset; one that does is LOST at some.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from typing import Any

# How long a lost cancellation may leave the task running before the sweep calls it lost (a
# loop that swallowed it would run for ever).
STILL_RUNNING_SECONDS = 2.0


class Outcome(enum.Enum):
    CANCELLED = "cancelled"  # the cancellation reached the task's awaiter
    LOST = "lost"  # cancel() was accepted, yet the task returned, raised something else or ran on
    FINISHED_FIRST = "finished first"  # done before the cancellation came: nothing to lose


def _cancel_after(task: asyncio.Task[Any], turns: int, accepted: list[bool]) -> None:
    if turns:
        asyncio.get_running_loop().call_soon(_cancel_after, task, turns - 1, accepted)
    else:
        accepted.append(task.cancel())


async def once(
    start: Callable[[], Awaitable[Any]],
    *,
    hold: float,
    turns: int,
    settle_turns: int = 3,
    settle_seconds: float = 0.0,
) -> Outcome:
    """Start the operation, block the loop for `hold` s once it is under way (after
    `settle_turns` loop turns, then `settle_seconds`), cancel it `turns` loop turns later; what
    became of the cancellation."""
    loop = asyncio.get_running_loop()

    async def run() -> Any:
        return await start()

    task = asyncio.create_task(run())
    for _ in range(settle_turns):
        await asyncio.sleep(0)
    if settle_seconds:
        await asyncio.sleep(settle_seconds)
    accepted: list[bool] = []

    def block() -> None:
        time.sleep(hold)  # the point: nothing else runs meanwhile
        loop.call_later(0, _cancel_after, task, turns, accepted)

    loop.call_soon(block)
    done, _ = await asyncio.wait({task}, timeout=hold + STILL_RUNNING_SECONDS)
    if not done:
        await _end(task)
        return Outcome.LOST
    if task.cancelled():
        return Outcome.CANCELLED
    task.exception()  # retrieved: a TimeoutError instead of the cancellation is a loss too
    return Outcome.LOST if accepted == [True] else Outcome.FINISHED_FIRST


async def sweep(
    start: Callable[[], Awaitable[Any]],
    *,
    hold: float,
    offsets: int = 12,
    settle_turns: int = 3,
    settle_seconds: float = 0.0,
) -> dict[int, Outcome]:
    """`once` for each cancellation offset 0 .. offsets-1 (in loop turns after the block)."""
    return {
        turns: await once(
            start,
            hold=hold,
            turns=turns,
            settle_turns=settle_turns,
            settle_seconds=settle_seconds,
        )
        for turns in range(offsets)
    }


async def _end(task: asyncio.Task[Any]) -> None:
    """Cancel a task that swallowed its cancellation until it ends (a guard-less loop ends at
    a later cancellable await)."""
    for _ in range(100):
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
        if task.done():
            return
    raise AssertionError("the task ignores every cancellation")
