"""WorkQueue keeps client-go's workqueue contract (k8s.io/client-go/util/workqueue, v1.36)."""

import asyncio
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostaffinity.runtime.process.workqueue import SWEEP_WINDOW, WorkQueue


async def test_a_key_added_twice_before_it_is_taken_is_handled_once() -> None:
    queue: WorkQueue[str] = WorkQueue("test")
    for key in ("a", "b", "a", "a"):
        queue.add(key)

    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert queue._ready.empty()


async def test_a_key_added_while_it_is_handled_comes_back_after_done_not_before() -> None:
    queue: WorkQueue[str] = WorkQueue("test")
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # the desired state changed while a worker had it

    assert queue._ready.empty(), "never handed to a second worker at once"
    queue.done(key)
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_backoff_doubles_per_failure_up_to_the_cap_and_success_forgets() -> None:
    queue: WorkQueue[str] = WorkQueue("test", base_delay=0.01, max_delay=0.05)

    delays = [queue.add_rate_limited("a") for _ in range(5)]

    assert delays == [0.01, 0.02, 0.04, 0.05, 0.05]
    queue.forget("a")
    assert queue.add_rate_limited("a") == 0.01


async def test_a_plain_add_is_not_held_back_by_a_pending_retry() -> None:
    queue: WorkQueue[str] = WorkQueue("test", base_delay=60.0)
    queue.add_rate_limited("a")
    assert not queue.idle()

    queue.add("a")

    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_add_after_keeps_the_earlier_time() -> None:
    queue: WorkQueue[str] = WorkQueue("test")
    queue.add_after("a", 0.05)
    queue.add_after("a", 60.0)

    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_run_retries_a_failing_key_until_it_succeeds() -> None:
    queue: WorkQueue[str] = WorkQueue("test", base_delay=0.01)
    attempts: Counter[str] = Counter()
    succeeded = asyncio.Event()

    async def handle(key: str) -> None:
        attempts[key] += 1
        if attempts[key] < 4:
            raise ConnectionError("down")
        succeeded.set()

    queue.add("a")
    runner = asyncio.create_task(queue.run(handle, workers=2))
    await asyncio.wait_for(succeeded.wait(), 5)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner

    assert attempts["a"] == 4
    assert queue.failures("a") == 0
    assert queue.idle()


@settings(max_examples=40, deadline=None)
@given(
    script=st.lists(
        st.tuples(st.sampled_from("abcd"), st.booleans(), st.integers(0, 3)), max_size=30
    )
)
def test_every_key_is_handled_after_its_last_add_and_never_twice_at_once(
    script: list[tuple[str, bool, int]],
) -> None:
    """Adds arrive while workers run; some attempts fail. In the end every key was handled
    successfully after it was last added, and no key was ever in two handlers at once."""

    async def scenario() -> None:
        queue: WorkQueue[str] = WorkQueue("test", base_delay=0.001, max_delay=0.004)
        failures_left = Counter({key: fails for key, _, fails in script})
        last_added: dict[str, int] = {}
        last_success: dict[str, int] = {}
        busy: set[str] = set()
        clock = 0

        async def handle(key: str) -> None:
            nonlocal clock
            assert key not in busy
            busy.add(key)
            started = clock
            await asyncio.sleep(0)
            busy.discard(key)
            if failures_left[key]:
                failures_left[key] -= 1
                raise RuntimeError("transient")
            last_success[key] = started

        runner = asyncio.create_task(queue.run(handle, workers=3))
        for key, yield_between, _ in script:
            clock += 1
            last_added[key] = clock
            queue.add(key)
            if yield_between:
                await asyncio.sleep(0)
        while not queue.idle():  # noqa: ASYNC110 (polls the queue's state)
            await asyncio.sleep(0.001)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        assert all(last_success.get(key, -1) >= at for key, at in last_added.items())

    asyncio.run(scenario())


async def test_a_key_added_during_a_sweep_goes_before_the_rest_of_it() -> None:
    queue: WorkQueue[str] = WorkQueue("test")
    swept = [f"s{i}" for i in range(SWEEP_WINDOW * 10)]
    queue.sweep(swept)
    assert queue._ready.qsize() == SWEEP_WINDOW, "only a window is in line"
    first = await queue.get()
    queue.add("change")
    queue.done(first)

    order = [first]
    while not queue.idle():
        key = await queue.get()
        order.append(key)
        queue.done(key)

    assert order.index("change") <= SWEEP_WINDOW
    assert sorted(order) == sorted([*swept, "change"]), "every swept key handled, once"


async def test_a_sweep_keeps_the_queue_busy_until_its_last_key_is_done() -> None:
    queue: WorkQueue[str] = WorkQueue("test")
    queue.sweep(["a", "b", "a"])
    handled = []
    while not queue.idle():
        key = await queue.get()
        handled.append(key)
        queue.done(key)
    assert handled == ["a", "b"]
    queue.sweep(["c"])
    assert not queue.idle()


async def test_a_sweep_of_handlers_that_never_suspend_lets_a_change_in_meanwhile() -> None:
    """A resync's sweep, nothing to write: each handler returns without awaiting anything. A
    change arriving from the network (another task) must still be queued and handled before
    the sweep's end, not after all of it."""
    queue: WorkQueue[str] = WorkQueue("test")
    swept = [f"s{i}" for i in range(SWEEP_WINDOW * 20)]
    handled: list[str] = []
    under_way, everything = asyncio.Event(), asyncio.Event()

    async def handle(key: str) -> None:
        handled.append(key)
        under_way.set()
        if len(handled) == len(swept) + 1:
            everything.set()

    async def change_arrives() -> None:
        await under_way.wait()
        queue.add("change")

    queue.sweep(swept)
    arrival = asyncio.create_task(change_arrives())
    workers = asyncio.create_task(queue.run(handle, workers=4))
    await asyncio.wait_for(everything.wait(), 10)
    workers.cancel()
    await asyncio.gather(workers, arrival, return_exceptions=True)
    assert handled.index("change") <= 2 * SWEEP_WINDOW
