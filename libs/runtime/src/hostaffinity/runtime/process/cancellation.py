"""Honouring a cancellation that Python 3.11's `asyncio.wait_for` swallowed, and waiting with a
timeout that never swallows one.

On 3.11, when the awaited result and a `cancel()` arrive together, `wait_for` returns the result
and the cancellation is lost (python/cpython#86296, fixed in 3.12). nats-py awaits every publish,
request and fetch through `wait_for`, so a loop that calls NATS may never notice it was asked to
stop, and whoever awaits it hangs. The request is still counted on the task: loops check it.
Our own waits use `asyncio.timeout` instead (`wait_set`), which keeps the cancellation.
"""

import asyncio


def raise_if_cancel_requested() -> None:
    """Raise CancelledError when the current task has a pending cancellation request."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` was set within `seconds`; a cancellation that comes with the set wins."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
