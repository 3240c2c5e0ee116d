"""The bus outbox: in order, retried with backoff while the bus fails, deduplicated by event id,
bounded with drops counted."""

import asyncio
import itertools
from collections.abc import Callable

from prometheus_client import REGISTRY

from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.schema import Event, NodeUnmatched


def event(n: int) -> Event:
    return NodeUnmatched(id=f"e{n}", occurred_at="t", source="test", node=f"n{n}", reason="x")


async def eventually(check: Callable[[], bool]) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_events_wait_while_the_bus_fails_and_go_out_in_order_once() -> None:
    sent: list[str] = []
    attempts: list[float] = []
    failing = [True]

    async def publish(item: Event) -> None:
        if failing[0]:
            attempts.append(asyncio.get_running_loop().time())
            raise ConnectionError("nats away")
        sent.append(item.id)

    outbox = Outbox("test", publish, retry_base_seconds=0.01, retry_max_seconds=0.04)
    runner = asyncio.create_task(outbox.run())
    try:
        for n in range(3):
            outbox.put(event(n))
        outbox.put(event(1))  # the same id again while it waits: kept once
        await eventually(lambda: len(attempts) >= 5)
        assert sent == []
        assert len(outbox) == 3
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert gaps[2] > gaps[0]  # backing off, up to the ceiling
        failing[0] = False
        await eventually(lambda: len(sent) == 3)
        assert sent == ["e0", "e1", "e2"]
        assert len(outbox) == 0
        outbox.put(event(1))  # published already: a later repeat goes out (JetStream dedupes)
        await eventually(lambda: len(sent) == 4)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


def exported(name: str, outbox: str) -> float:
    """The sample's value as /metrics shows it (0 before the first one)."""
    values = [
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name and sample.labels.get("outbox") == outbox
    ]
    return sum(values)


def test_a_new_outbox_is_exported_at_zero() -> None:
    """Before anything waits or drops, so increase() in an alert sees the first drop."""
    setup_telemetry("hostaffinity-tests")
    Outbox("fresh", lambda _e: asyncio.sleep(0))
    names = {
        sample.name
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("outbox") == "fresh" and sample.value == 0
    }
    assert names == {"hostaffinity_bus_outbox_queued", "hostaffinity_bus_outbox_dropped_total"}


def test_a_full_outbox_drops_the_oldest_and_counts_it() -> None:
    setup_telemetry("hostaffinity-tests")
    outbox = Outbox("bounded", lambda _e: asyncio.sleep(0), capacity=2)
    for n in range(5):
        outbox.put(event(n))
    assert len(outbox) == 2
    assert outbox.dropped == 3
    outbox.put(event(0))  # a dropped id may come again
    assert len(outbox) == 2
    assert outbox.dropped == 4
    assert exported("hostaffinity_bus_outbox_queued", "bounded") == 2
    assert exported("hostaffinity_bus_outbox_dropped_total", "bounded") == 4


async def test_on_stop_what_waits_is_published_within_the_drain_time() -> None:
    sent: list[str] = []
    first_attempt = [True]

    async def publish(item: Event) -> None:
        if first_attempt[0]:  # the first publish is in flight when the stop comes
            first_attempt[0] = False
            await asyncio.sleep(60)
        sent.append(item.id)

    outbox = Outbox("test", publish)
    runner = asyncio.create_task(outbox.run())
    for n in range(3):
        outbox.put(event(n))
    await eventually(lambda: not first_attempt[0])
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    assert runner.cancelled()
    assert sent == ["e0", "e1", "e2"]
    assert len(outbox) == 0


async def test_on_stop_with_the_bus_not_answering_the_drain_gives_up_at_its_bound() -> None:
    async def publish(_item: Event) -> None:
        await asyncio.sleep(60)  # no ack comes

    outbox = Outbox("test", publish, drain_seconds=0.2)
    runner = asyncio.create_task(outbox.run())
    for n in range(3):
        outbox.put(event(n))
    await asyncio.sleep(0.05)
    runner.cancel()
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(asyncio.gather(runner, return_exceptions=True), 2)
    assert asyncio.get_running_loop().time() - started >= 0.2  # it did wait for the bus
    assert len(outbox) == 3  # kept (and logged), never half-published


async def test_a_stop_swallowed_by_the_last_publish_still_ends_the_outbox() -> None:
    """Python 3.11's `wait_for` returns the result when it and a cancellation arrive together
    (nats-py's publish and the outbox's own timeout both use it). When that was the last event,
    the outbox used to go back to waiting for more, which never came: the service's stop then
    hung until its drain bound (DrainTimeout in the drs-translator's e2e test)."""
    ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    publishing: list[str] = []
    sent: list[str] = []

    async def publish(item: Event) -> None:
        publishing.append(item.id)
        await ack  # the JetStream ack, in flight when the stop comes
        sent.append(item.id)

    outbox = Outbox("test", publish)
    runner = asyncio.create_task(outbox.run())
    outbox.put(event(1))
    await eventually(lambda: publishing == ["e1"])
    ack.set_result(None)  # the ack and the stop in the same loop turn
    runner.cancel()
    done, _ = await asyncio.wait({runner}, timeout=2.0)
    try:
        assert runner in done, "the outbox went on waiting for events after it was cancelled"
        assert runner.cancelled()
        assert sent == ["e1"]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_a_stop_during_on_published_leaves_the_event_for_the_drain() -> None:
    """A kept copy (the drs-translator's) is forgotten in `on_published`: a stop that interrupts
    it must not lose the forgetting, so the event stays at the head and the drain sends it (and
    forgets it) again; JetStream stores it once, by id."""
    sent: list[str] = []
    forgotten: list[str] = []
    forgetting = asyncio.Event()

    async def publish(item: Event) -> None:
        sent.append(item.id)

    async def forget(item: Event) -> None:
        if not forgetting.is_set():
            forgetting.set()
            await asyncio.Event().wait()  # the first forget is still under way at the stop
        forgotten.append(item.id)

    outbox = Outbox("test", publish, on_published=forget, drain_seconds=1.0)
    runner = asyncio.create_task(outbox.run())
    outbox.put(event(1))
    await asyncio.wait_for(forgetting.wait(), 2.0)
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    assert sent == ["e1", "e1"]  # once more by the drain
    assert forgotten == ["e1"]
    assert len(outbox) == 0


async def test_a_producer_unwinds_first_and_what_it_queues_meanwhile_is_drained() -> None:
    """`run_with`: cancelled, the producer finishes its work in flight (an eviction reporting)
    and queues its event; the drain comes after, so that event goes out too. With `run` beside
    it as a sibling, the drain may end before the producer has queued it."""
    sent: list[str] = []

    async def publish(item: Event) -> None:
        sent.append(item.id)

    outbox = Outbox("test", publish, drain_seconds=1.0)
    in_flight = asyncio.Event()

    async def producer() -> None:
        in_flight.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # the call in flight answers
            outbox.put(event(7))

    runner = asyncio.create_task(outbox.run_with(producer()))
    await in_flight.wait()
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    assert sent == ["e7"]
