"""raise_if_cancel_requested: a cancellation swallowed below still ends the loop above."""

import asyncio
import contextlib

import pytest

from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested


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
