"""The bus outbox: in order, retried while the bus fails, bounded with drops counted."""

from __future__ import annotations

import asyncio

from hostaffinity.descheduler.reporting import Outbox
from hostaffinity.schema import Event, NodeUnmatched


def event(n: int) -> Event:
    return NodeUnmatched(id=f"e{n}", occurred_at="t", source="test", node=f"n{n}", reason="x")


async def test_events_wait_while_the_bus_fails_and_go_out_in_order() -> None:
    sent: list[str] = []
    failing = [True]

    async def publish(item: Event) -> None:
        if failing[0]:
            raise ConnectionError("nats away")
        sent.append(item.id)

    outbox = Outbox(publish, lambda: None)
    runner = asyncio.create_task(outbox.run())
    try:
        for n in range(3):
            outbox.put(event(n))
        await asyncio.sleep(0.1)
        assert sent == []
        assert len(outbox) == 3
        failing[0] = False
        for _ in range(100):
            if len(sent) == 3:
                break
            await asyncio.sleep(0.05)
        assert sent == ["e0", "e1", "e2"]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


def test_a_full_outbox_drops_the_oldest_and_counts_it() -> None:
    dropped: list[int] = []
    outbox = Outbox(lambda _e: asyncio.sleep(0), lambda: dropped.append(1), capacity=2)
    for n in range(5):
        outbox.put(event(n))
    assert len(outbox) == 2
    assert len(dropped) == 3
