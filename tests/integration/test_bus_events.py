"""Events on a real nats-server: dedup, the publisher's trace context, reading the stream back
(after a server restart too), the DLQ a service's topology watch parks bad values in, and the
CLI's reading of bad bytes."""

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from nats.js.api import Header
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.deadletters import PARKED_PAYLOAD_LIMIT
from hostaffinity.runtime.bus.kv import Bootstrapped, NodeChange
from hostaffinity.runtime.bus.replay import replay
from hostaffinity.runtime.process.telemetry import Telemetry, setup_telemetry
from hostaffinity.schema import (
    DLQ_STREAM,
    EVENTS_STREAM,
    TOPOLOGY_BUCKET,
    DeadLetter,
    TopologyEvent,
    decode_event,
    dlq_subject,
    event_subject,
    node_key,
)
from tests.platform.bus_values import node_placed
from tests.platform.bus_values import node_placement as placement
from tests.platform.nats import NatsServer, free_port

SERVICE = "test-service"
WAIT_SECONDS = 10.0
DEAD_LETTERS_METRIC = "hostaffinity_bus_dead_letters_total"
TOPOLOGY_STREAM = f"KV_{TOPOLOGY_BUCKET}"


async def dead_letter(bus: Bus) -> DeadLetter:
    msg = await bus.js.get_last_msg(DLQ_STREAM, dlq_subject(SERVICE))
    return msgspec.json.decode(msg.data or b"", type=DeadLetter)


def dead_letters_counted() -> float:
    """The counter as /metrics shows it (whatever scope labels the exporter adds)."""
    wanted = {"service": SERVICE, "stream": TOPOLOGY_STREAM}
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == DEAD_LETTERS_METRIC and wanted.items() <= sample.labels.items()
    )


async def stored_events(bus: Bus) -> list[TopologyEvent]:
    """The events stream's node.placed events from its start, as the CLI and the descheduler
    read it back (runtime bus/replay.py)."""
    async with asyncio.timeout(WAIT_SECONDS):
        return [
            decode_event(message.data)
            async for message in replay(bus.js, [event_subject("node.placed")], from_start=True)
        ]


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


async def test_every_event_is_stamped_with_the_install_s_cluster_identity(bus: Bus) -> None:
    """Whoever built it, an event carries the cluster its install serves (several installs'
    events meet at a fleet hub, and one vCenter's DRS events name several clusters)."""
    bus.cluster = "prod-east"
    event = node_placed("worker-1")
    assert event.cluster == ""
    await bus.publish_event(event)
    stored = await bus.js.get_last_msg(EVENTS_STREAM, event_subject("node.placed"))
    decoded = decode_event(stored.data or b"")
    assert (decoded.cluster, decoded.id) == ("prod-east", event.id)


WRONG_TYPE = b'{"node": 7}'
NESTED = b'{"node": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
BAD_UTF8 = b'{"node": "\xc3\x28"}'
OVERSIZE = b'{"node": "' + b"x" * 1_000_000 + b'"}'


@pytest.mark.parametrize(
    "garbage",
    [WRONG_TYPE, BAD_UTF8, NESTED, OVERSIZE],
    ids=["wrong-type", "invalid-utf8", "nested", "1MB"],
)
async def test_an_undecodable_topology_value_is_parked_counted_and_the_watch_goes_on(
    bus: Bus, garbage: bytes
) -> None:
    counted_before = dead_letters_counted()
    await bus.provision()
    raw = await bus.js.key_value(TOPOLOGY_BUCKET)
    await raw.put(node_key("broken"), garbage)
    good = placement("worker-2", "host-11", version=1)
    store = await bus.topology(parked_as=SERVICE)
    await store.put_node(good)

    async with store.watch() as watch, asyncio.timeout(WAIT_SECONDS):
        assert await anext(watch) == NodeChange(node="worker-2", placement=good, revision=2)
        assert await anext(watch) == Bootstrapped()

    letter = await dead_letter(bus)
    assert letter.service == SERVICE
    assert letter.subject == f"$KV.{TOPOLOGY_BUCKET}.{node_key('broken')}"
    # A copy that fits in one NATS message: the whole, or its first bytes and the size.
    assert letter.payload == garbage[:PARKED_PAYLOAD_LIMIT]
    assert letter.payload_size == len(garbage)
    assert letter.reason.startswith("undecodable value: ")
    assert ("payload cut" in letter.reason) == (garbage is OVERSIZE)
    assert dead_letters_counted() == counted_before + 1


async def eventually(condition: Callable[[], Awaitable[bool]]) -> None:
    """Poll state that offers nothing to await (server state, connection status)."""
    async with asyncio.timeout(WAIT_SECONDS):
        while True:
            if await condition():
                return
            await asyncio.sleep(0.05)


async def test_an_event_carries_its_publish_span_as_traceparent(
    bus: Bus, telemetry: Telemetry
) -> None:
    spans = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    with trace.get_tracer(__name__).start_as_current_span("node-labeller reconcile") as root:
        await bus.publish_event(node_placed("worker-5"))
    stored = await bus.js.get_last_msg(EVENTS_STREAM, event_subject("node.placed"))

    publish = next(s for s in spans.get_finished_spans() if s.name.endswith(" publish"))
    assert publish.parent is not None
    assert publish.parent.span_id == root.get_span_context().span_id
    assert stored.headers is not None
    # Whoever reads the event (an outside subscriber) continues the trace from the publish span.
    _, trace_id, parent_id, _ = stored.headers["traceparent"].split("-")
    assert publish.context is not None
    assert (int(trace_id, 16), int(parent_id, 16)) == (
        publish.context.trace_id,
        publish.context.span_id,
    )


async def test_client_reconnects_after_server_restart_and_publishes_and_reads_again(
    nats_server: NatsServer, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hostaffinity.runtime.bus.client")
    before, after = node_placed("worker-20"), node_placed("worker-21")

    async def connected() -> bool:
        return bus.nc.is_connected

    first = await bus.publish_event(before)
    assert await stored_events(bus) == [before]
    await nats_server.restart()
    await eventually(connected)
    second = await bus.publish_event(after)

    assert second.seq == first.seq + 1
    assert await stored_events(bus) == [before, after]
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
