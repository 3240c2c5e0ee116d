"""A test that leaves asyncio tasks running fails (at teardown, naming them).

A task nobody awaits outlives its test: it keeps a connection or a port, writes into the next
test's state, or hides an unfinished shutdown that production would hit at SIGTERM. This guard
runs after every other fixture of an async test has been torn down, gives finishing tasks a few
loop turns, then fails on what is still pending (and cancels it, so the next test starts clean).
Loaded for every test in the workspace by the root conftest.py.
"""

import asyncio
from collections.abc import AsyncIterator

import pytest

SETTLE_TURNS = 20  # loop turns for tasks that are already finishing (a cancelled task's finally)


def _describe(task: asyncio.Task[object]) -> str:
    frame = task.get_stack(limit=1)
    where = f" at {frame[0].f_code.co_filename}:{frame[0].f_lineno}" if frame else ""
    return f"{task.get_name()}: {task.get_coro()!r}{where}"


@pytest.fixture(autouse=True)
async def no_leaked_asyncio_tasks() -> AsyncIterator[None]:
    """Autouse, so set up before and torn down after the test's own fixtures."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()

    def pending() -> list[asyncio.Task[object]]:
        return [t for t in asyncio.all_tasks() if t is not current and t not in before]

    for _ in range(SETTLE_TURNS):
        if not pending():
            return
        await asyncio.sleep(0)
    leaked = pending()
    for task in leaked:
        task.cancel()
    await asyncio.gather(*leaked, return_exceptions=True)
    pytest.fail(
        "the test left asyncio tasks pending:\n" + "\n".join(_describe(t) for t in leaked),
        pytrace=False,
    )
