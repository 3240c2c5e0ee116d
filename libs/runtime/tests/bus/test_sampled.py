"""The sampled publisher counts what waits and what it gives up as every publisher does
(`hostaffinity_bus_outbox_*{outbox}`), from its start."""

import asyncio

from prometheus_client import REGISTRY

from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.schema import Event, NodeUnmatched


def event(n: int) -> Event:
    return NodeUnmatched(id=f"e{n}", occurred_at="t", source="test", node=f"n{n}", reason="x")


def exported(name: str, outbox: str) -> float | None:
    """The sample's value as /metrics shows it; None when there is no such series."""
    values = [
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name and sample.labels.get("outbox") == outbox
    ]
    return sum(values) if values else None


async def test_queued_and_dropped_events_are_counted_from_zero() -> None:
    setup_telemetry("hostaffinity-tests")
    failing = [True]

    async def publish(_event: Event) -> None:
        if failing[0]:
            raise ConnectionError("nats away")

    publisher = SampledPublisher("sampled-test", publish, ratio=1.0, capacity=2)
    assert exported("hostaffinity_bus_outbox_queued", "sampled-test") == 0
    assert exported("hostaffinity_bus_outbox_dropped_total", "sampled-test") == 0
    for n in range(3):  # the third finds the queue full
        publisher.offer(f"k{n}", lambda n=n: event(n))
    assert exported("hostaffinity_bus_outbox_queued", "sampled-test") == 2
    assert exported("hostaffinity_bus_outbox_dropped_total", "sampled-test") == 1
    runner = asyncio.create_task(publisher.run())
    try:
        for _ in range(200):  # both fail to publish: dropped, and no longer waiting
            if exported("hostaffinity_bus_outbox_queued", "sampled-test") == 0:
                break
            await asyncio.sleep(0.01)
        assert exported("hostaffinity_bus_outbox_queued", "sampled-test") == 0
        assert exported("hostaffinity_bus_outbox_dropped_total", "sampled-test") == 3
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
