"""A stop ends the process even when a library's task swallows its cancellation."""

import asyncio

from hostaffinity.runtime.runner import end_leftover_tasks


async def _swallows_cancellation(released: asyncio.Event) -> None:
    """As nats-py's reconnect loop did once its server went away as the service stopped; ends
    only when the test releases it (else the test's own loop could not close)."""
    while not released.is_set():
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            continue


async def test_tasks_that_end_when_cancelled_are_not_reported() -> None:
    sleeper = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    assert await end_leftover_tasks(1.0) == []
    assert sleeper.cancelled()


async def test_a_task_that_swallows_its_cancellation_is_reported_within_the_bound() -> None:
    released = asyncio.Event()
    stubborn = asyncio.create_task(_swallows_cancellation(released), name="stubborn")
    polite = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0.1)  # both running
    started = asyncio.get_running_loop().time()
    stuck = await end_leftover_tasks(0.3)
    assert asyncio.get_running_loop().time() - started < 2.0
    assert stuck == [stubborn]
    assert polite.cancelled()
    released.set()
    await stubborn
