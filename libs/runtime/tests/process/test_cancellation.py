"""raise_if_cancel_requested: a cancellation swallowed below still ends the loop above."""

import asyncio
import contextlib

import pytest

from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested, wait_set


async def test_a_swallowed_cancellation_is_raised_at_the_next_check() -> None:
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            raise_if_cancel_requested()
            rounds += 1
            with contextlib.suppress(asyncio.CancelledError):  # as 3.11's wait_for may do
                await asyncio.sleep(10)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert rounds == 1


async def test_no_request_no_raise() -> None:
    raise_if_cancel_requested()


async def test_a_stop_that_comes_with_the_event_is_not_lost() -> None:
    """The event set and the task cancelled in one step of the loop: 3.11's `wait_for` returns
    True here and the cancellation is gone; `wait_set` raises it."""
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_set(event, 10))
    await asyncio.sleep(0.01)
    event.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_wait_set_says_whether_the_event_came_in_time() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, 0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 5)
