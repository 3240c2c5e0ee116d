"""A NATS-aware loopback proxy whose JetStream deliveries reach the client late.

nats-server answers a JetStream API request and pushes a consumer's messages from different
goroutines, so nothing orders an API reply behind deliveries the consumer made before it; on a
loaded server the reply can reach the socket first. This proxy makes that order certain: frames
carrying a `$JS.ACK.` reply (push deliveries) are forwarded `lag` seconds after they arrive, in
their own order, while every other frame (API replies, PING/PONG, INFO) passes at once.
Requests from the client are forwarded after `latency`, as over a slow link, which gives the
consumer time to dispatch before the next request arrives.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from tests.platform.nats import NatsServer
from tests.platform.tcp_proxy import TcpProxy

_DELIVERY_REPLY = b"$JS.ACK."


class DeliveryLagProxy(TcpProxy):
    """`DeliveryLagProxy("127.0.0.1", nats.port, lag=0.3, latency=0.05)`; point the client at it."""

    def __init__(self, upstream_host: str, upstream_port: int, lag: float, latency: float) -> None:
        super().__init__(upstream_host, upstream_port)
        self._lag = lag
        self._latency = latency

    async def _client_to_server(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        await _forward(lambda: source.read(65536), sink, lambda _: self._latency)

    async def _server_to_client(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        def delay(frame: bytes) -> float:
            return self._lag if _is_delivery(frame) else 0.0

        await _forward(lambda: _read_frame(source), sink, delay)


async def _forward(
    read: Callable[[], Awaitable[bytes]],
    sink: asyncio.StreamWriter,
    delay: Callable[[bytes], float],
) -> None:
    """Copy units until the end; a unit with a delay is written that much later, behind the
    delayed ones before it; one without is written at once (it overtakes them). What is still
    in flight when the connection ends is lost, as on a link that went down."""
    late: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    writer = asyncio.create_task(_write_when_due(late, sink))
    try:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while unit := await read():
                if wait := delay(unit):
                    late.put_nowait((time.monotonic() + wait, unit))
                else:
                    sink.write(unit)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        sink.close()


async def _write_when_due(
    late: asyncio.Queue[tuple[float, bytes]], sink: asyncio.StreamWriter
) -> None:
    while True:
        due, unit = await late.get()
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        sink.write(unit)


async def _read_frame(source: asyncio.StreamReader) -> bytes:
    """One protocol frame: a control line, plus its payload for MSG/HMSG; b"" at the end."""
    line = await source.readline()
    if line.startswith((b"MSG ", b"HMSG ")):
        size = int(line.split()[-1])
        return line + await source.readexactly(size + 2)
    return line


def _is_delivery(frame: bytes) -> bool:
    tokens = frame.split(b"\r\n", 1)[0].split()
    with_reply = 5 if tokens[0] == b"MSG" else 6
    return len(tokens) == with_reply and tokens[3].startswith(_DELIVERY_REPLY)


@pytest.fixture
async def lagging_reader(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A connection whose JetStream deliveries arrive after the API replies sent behind them."""
    proxy = DeliveryLagProxy("127.0.0.1", nats_server.port, lag=0.3, latency=0.05)
    await proxy.start()
    other = await Bus.connect(NatsSettings(servers=[f"nats://127.0.0.1:{proxy.port}"]), name="lag")
    try:
        yield other
    finally:
        await other.close()
        await proxy.stop()
