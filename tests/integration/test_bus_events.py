"""Events and durable consumers on a real nats-server: dedup, DLQ, traces, resume, reconnect."""

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from nats.js.api import Header
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from prometheus_client import REGISTRY

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.consumer import ConsumerSettings, DurableConsumer
from hostaffinity.runtime.bus.deadletters import PARKED_PAYLOAD_LIMIT
from hostaffinity.runtime.process.telemetry import Telemetry, setup_telemetry
from hostaffinity.schema import (
    DLQ_STREAM,
    EVENTS_STREAM,
    DeadLetter,
    NodePlaced,
    TopologyEvent,
    decode_event,
    dlq_subject,
    event_subject,
)
from tests.platform.bus_values import node_placed
from tests.platform.nats import NatsServer, free_port

SERVICE = "test-service"
WAIT_SECONDS = 10.0
DEAD_LETTERS_METRIC = "hostaffinity_bus_dead_letters_total"


def consumer_settings(**overrides: object) -> ConsumerSettings:
    """Short timings so redeliveries happen within a test."""
    defaults: dict[str, object] = {
        "durable": SERVICE,
        "ack_wait_seconds": 2.0,
        "backoff_seconds": (0.1,),
        "max_deliver": 3,
        "fetch_timeout_seconds": 0.5,
    }
    return msgspec.convert(defaults | overrides, ConsumerSettings)


class Recorder:
    """A handler that remembers what it was given, optionally failing on some."""

    def __init__(self, should_fail: Callable[[TopologyEvent], bool] = lambda _: False) -> None:
        self.events: list[TopologyEvent] = []
        self.spans: list[trace.Span] = []
        self._should_fail = should_fail
        self._changed = asyncio.Condition()

    async def __call__(self, event: TopologyEvent) -> None:
        async with self._changed:
            self.events.append(event)
            self.spans.append(trace.get_current_span())
            self._changed.notify_all()
        if self._should_fail(event):
            raise RuntimeError(f"cannot handle {event.id}")

    async def wait_for(self, count: int) -> None:
        """Until `count` deliveries were handled (or attempted)."""
        async with asyncio.timeout(WAIT_SECONDS), self._changed:
            await self._changed.wait_for(lambda: len(self.events) >= count)

    async def wait_for_event(self, event: TopologyEvent) -> None:
        """Until `event` was delivered; delivery is at least once, so others may repeat."""
        async with asyncio.timeout(WAIT_SECONDS), self._changed:
            await self._changed.wait_for(lambda: event in self.events)


@contextlib.asynccontextmanager
async def consuming(
    bus: Bus, handler: Callable[[TopologyEvent], Awaitable[None]], settings: ConsumerSettings
) -> AsyncIterator[None]:
    """Provision a durable consumer (as `hostaffinity bus provision` does), run it for the
    duration of the block, then cancel it."""
    await bus.provision(consumers=[settings])
    consumer = DurableConsumer(
        bus.js, service=SERVICE, settings=settings, decode=decode_event, handler=handler
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def dead_letter(bus: Bus) -> DeadLetter:
    msg = await bus.js.get_last_msg(DLQ_STREAM, dlq_subject(SERVICE))
    return msgspec.json.decode(msg.data or b"", type=DeadLetter)


def dead_letters_counted() -> float:
    """The counter as /metrics shows it (whatever scope labels the exporter adds)."""
    wanted = {"service": SERVICE, "stream": EVENTS_STREAM}
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == DEAD_LETTERS_METRIC and wanted.items() <= sample.labels.items()
    )


@pytest.fixture(autouse=True)
def telemetry() -> Telemetry:
    """Installed as a service would: spans are recorded, the counter reaches /metrics."""
    return setup_telemetry("hostaffinity-tests")


async def test_the_same_event_published_twice_is_stored_once(bus: Bus) -> None:
    event = node_placed("worker-1")

    first = await bus.publish_event(event)
    second = await bus.publish_event(event)

    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq
    info = await bus.js.stream_info(EVENTS_STREAM)
    assert info.state.messages == 1
    stored = await bus.js.get_last_msg(EVENTS_STREAM, event_subject("node.placed"))
    assert stored.headers is not None
    assert stored.headers[Header.MSG_ID.value] == event.id


WRONG_TYPE = b'{"type": "node.placed", "id": 7}'
NESTED = b'{"type": "node.placed", "id": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
BAD_UTF8 = b'{"type": "node.placed", "id": "\xc3\x28", "node": "n"}'
OVERSIZE = b'{"type": "node.placed", "id": "' + b"x" * 1_000_000 + b'"}'


@pytest.mark.parametrize(
    "garbage",
    [WRONG_TYPE, BAD_UTF8, NESTED, OVERSIZE],
    ids=["wrong-type", "invalid-utf8", "nested", "1MB"],
)
async def test_undecodable_message_is_parked_counted_acked_and_the_next_one_handled(
    bus: Bus, garbage: bytes
) -> None:
    counted_before = dead_letters_counted()
    await bus.js.publish(event_subject("node.placed"), garbage)
    good = node_placed("worker-2")
    await bus.publish_event(good)
    recorder = Recorder()

    async with consuming(bus, recorder, consumer_settings()):
        await recorder.wait_for(1)

    assert recorder.events == [good]
    letter = await dead_letter(bus)
    assert letter.service == SERVICE
    assert letter.subject == event_subject("node.placed")
    # A copy that fits in one NATS message: the whole, or its first bytes and the size.
    assert letter.payload == garbage[:PARKED_PAYLOAD_LIMIT]
    assert letter.payload_size == len(garbage)
    assert letter.reason.startswith("does not decode: ")
    assert ("payload cut" in letter.reason) == (garbage is OVERSIZE)
    assert dead_letters_counted() == counted_before + 1
    info = await bus.js.consumer_info(EVENTS_STREAM, SERVICE)
    assert info.ack_floor.stream_seq == 2
    assert info.num_ack_pending == 0


async def test_handler_failure_is_retried_then_parked_after_max_deliver(bus: Bus) -> None:
    failing = node_placed("worker-3")
    good = node_placed("worker-4")
    await bus.publish_event(failing)
    await bus.publish_event(good)
    recorder = Recorder(should_fail=lambda event: event == failing)

    async with consuming(bus, recorder, consumer_settings(max_deliver=3)):
        await recorder.wait_for(4)
        letter = await wait_for_dead_letter(bus)

    assert recorder.events.count(failing) == 3
    assert recorder.events.count(good) == 1
    assert letter.reason.startswith("handler failed on all 3 deliveries")
    assert msgspec.json.decode(letter.payload, type=NodePlaced) == failing


async def eventually(condition: Callable[[], Awaitable[bool]]) -> None:
    """Poll state that offers nothing to await (server state, connection status)."""
    async with asyncio.timeout(WAIT_SECONDS):
        while True:
            if await condition():
                return
            await asyncio.sleep(0.05)


async def wait_for_dead_letter(bus: Bus) -> DeadLetter:
    async def parked() -> bool:
        return (await bus.js.stream_info(DLQ_STREAM)).state.messages > 0

    await eventually(parked)
    return await dead_letter(bus)


async def test_traceparent_of_the_publisher_is_the_parent_of_the_consumer_span(bus: Bus) -> None:
    tracer = trace.get_tracer(__name__)
    recorder = Recorder()
    with tracer.start_as_current_span("node-labeller reconcile") as root:
        await bus.publish_event(node_placed("worker-5"))
    stored = await bus.js.get_last_msg(EVENTS_STREAM, event_subject("node.placed"))

    async with consuming(bus, recorder, consumer_settings()):
        await recorder.wait_for(1)

    trace_id = root.get_span_context().trace_id
    assert stored.headers is not None
    assert stored.headers["traceparent"].split("-")[1] == f"{trace_id:032x}"
    consumer_span = recorder.spans[0]
    assert isinstance(consumer_span, ReadableSpan)
    assert consumer_span.context is not None
    assert consumer_span.context.trace_id == trace_id
    assert consumer_span.parent is not None
    assert consumer_span.parent.is_remote
    assert consumer_span.parent.span_id == int(stored.headers["traceparent"].split("-")[2], 16)


async def test_durable_consumer_restarted_mid_stream_resumes_where_it_stopped(
    nats_server: NatsServer, bus: Bus
) -> None:
    events = [node_placed(f"worker-{n}") for n in range(10, 14)]
    for event in events[:3]:
        await bus.publish_event(event)
    in_flight = asyncio.Event()

    async def stuck_on_third(event: TopologyEvent) -> None:
        await first_run(event)
        if event == events[2]:
            in_flight.set()
            await asyncio.Event().wait()  # the "crash": never acked

    first_run = Recorder()
    first_bus = await Bus.connect(nats_server.settings(), name="first-run")
    try:
        async with consuming(first_bus, stuck_on_third, consumer_settings()):
            async with asyncio.timeout(WAIT_SECONDS):
                await in_flight.wait()
    finally:
        await first_bus.close()
    await bus.publish_event(events[3])

    second_run = Recorder()
    async with consuming(bus, second_run, consumer_settings()):
        await second_run.wait_for(2)
        await asyncio.sleep(0.5)  # room for anything that should not come

    assert first_run.events == events[:3]
    # The unacked third event is redelivered after ack_wait, so it may come after the fourth.
    assert sorted(event.id for event in second_run.events) == sorted(e.id for e in events[2:])


async def test_client_reconnects_after_server_restart_and_publishes_and_consumes_again(
    nats_server: NatsServer, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hostaffinity.runtime.bus.client")
    before, after = node_placed("worker-20"), node_placed("worker-21")
    recorder = Recorder()

    async def connected() -> bool:
        return bus.nc.is_connected

    async with consuming(bus, recorder, consumer_settings()):
        first = await bus.publish_event(before)
        await recorder.wait_for(1)
        await nats_server.restart()
        await eventually(connected)
        second = await bus.publish_event(after)
        await recorder.wait_for_event(after)

    assert second.seq == first.seq + 1
    # An ack in flight when the server stopped may be lost: `before` can come again, no more.
    assert set(recorder.events) == {before, after}
    messages = [record.getMessage() for record in caplog.records]
    assert "disconnected from NATS; reconnecting" in messages
    assert "reconnected to NATS" in messages


async def test_cli_events_reports_undecodable_bytes_and_goes_on(
    bus: Bus, nats_server: NatsServer
) -> None:
    for undecodable in (BAD_UTF8, NESTED, OVERSIZE):
        await bus.js.publish(event_subject("node.placed"), undecodable)
    good = node_placed("worker-4")
    await bus.publish_event(good)
    cli = Path(sys.executable).parent / "hostaffinity"
    process = await asyncio.create_subprocess_exec(
        str(cli), "events", "--all", "--nats", nats_server.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        async with asyncio.timeout(WAIT_SECONDS):
            line = await process.stdout.readline()
        assert decode_event(line) == good
        errors = [await process.stderr.readline() for _ in range(3)]
    finally:
        process.terminate()
        await process.wait()
    assert all(e.startswith(b"undecodable message on hostaffinity.events.") for e in errors)
    assert [e.split(b"(")[1].split(b" ")[0] for e in errors] == [
        str(len(b)).encode() for b in (BAD_UTF8, NESTED, OVERSIZE)
    ]


async def test_cli_events_says_when_nats_cannot_be_reached() -> None:
    unused_tcp_port = free_port()
    cli = Path(sys.executable).parent / "hostaffinity"
    process = await asyncio.create_subprocess_exec(
        str(cli), "events", "--nats", f"nats://127.0.0.1:{unused_tcp_port}",
        "--connect-timeout", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(WAIT_SECONDS):
        _, stderr = await process.communicate()
    assert process.returncode == 1
    assert f"cannot reach NATS at nats://127.0.0.1:{unused_tcp_port} within 1 s".encode() in stderr
