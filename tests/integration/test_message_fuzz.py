"""Every message decoder under malformed bytes at volume (tests/platform/fuzz_inputs.py, from a
valid document of each type: tests/platform/schema_examples.py).

In process, per event type and per KV value: decoding either gives the type or raises one of
UNDECODABLE, what every reader catches (the consumer, the topology watch and snapshot, the
drs-translator's loaders), never anything else. It found invalid UTF-8 (UnicodeDecodeError) and
deep nesting (RecursionError) in KV values, which the KV readers did not catch. Through a real
nats-server: every malformed event a durable consumer meets is parked in the DLQ with its reason
and acked, and the consumer goes on. `FUZZ_INPUTS=10000` runs the full count through the bus too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from nats.js.kv import KeyValue

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.consumer import ConsumerSettings, DurableConsumer
from hostaffinity.runtime.bus.deadletters import PARKED_PAYLOAD_LIMIT
from hostaffinity.runtime.bus.kv import topology_change
from hostaffinity.schema import (
    DLQ_STREAM,
    EVENT_MESSAGES,
    EVENTS_STREAM,
    UNDECODABLE,
    DeadLetter,
    DrsOwnership,
    EsxiHost,
    NodePlacement,
    TopologyEvent,
    decode_event,
    dlq_subject,
    event_subject,
    event_type_of,
)
from tests.platform.fuzz_inputs import FULL_RUN, fuzz_count, fuzzed
from tests.platform.schema_examples import example

# Over the bus each input is two publishes and an ack: a sample in CI, the full run on demand.
BUS_SAMPLE = 1_000
# What nats-server accepts in one message (max_payload, 1 MiB in the shipped configs).
MAX_PAYLOAD = 1024 * 1024
SERVICE = "fuzz"
DRAIN_SECONDS = 120.0


def misdecoded(
    decode: Callable[[bytes], object], caught: tuple[type[BaseException], ...], valid: Any
) -> list[str]:
    """Inputs whose decoding raised something its reader would not catch."""
    problems = []
    for name, body in fuzzed(valid, fuzz_count(FULL_RUN)):
        try:
            decode(body)
        except caught:
            continue
        except Exception as error:
            problems.append(f"{name}: {error!r} from {body[:120]!r}")
    return problems


@pytest.mark.parametrize("message", EVENT_MESSAGES, ids=event_type_of)
def test_each_event_type_decodes_malformed_bytes_or_says_undecodable(
    message: type[msgspec.Struct],
) -> None:
    assert misdecoded(decode_event, UNDECODABLE, example(message)) == []


def entry(key: str, value: bytes) -> KeyValue.Entry:
    return KeyValue.Entry(
        bucket="hostaffinity-topology",
        key=key,
        value=value,
        revision=1,
        delta=None,
        created=None,
        operation=None,
    )


@pytest.mark.parametrize(
    ("message", "key"),
    [(NodePlacement, "node.worker-1.example.com"), (EsxiHost, "host.host-11")],
    ids=["NodePlacement", "EsxiHost"],
)
def test_topology_values_decode_or_raise_what_the_watch_skips(
    message: type[msgspec.Struct], key: str
) -> None:
    def decode(body: bytes) -> object:
        return topology_change(entry(key, body))

    assert misdecoded(decode, UNDECODABLE, example(message)) == []


def test_drs_ownership_records_decode_or_raise_what_the_loader_skips() -> None:
    decoder = msgspec.json.Decoder(DrsOwnership)
    assert misdecoded(decoder.decode, UNDECODABLE, example(DrsOwnership)) == []


def undecodable(body: bytes) -> bool:
    try:
        decode_event(body)
    except UNDECODABLE:
        return True
    return False


async def test_every_malformed_event_a_consumer_meets_is_parked_with_its_reason(
    bus: Bus,
) -> None:
    settings = ConsumerSettings(durable=SERVICE, batch=256, fetch_timeout_seconds=0.5)
    await bus.provision(consumers=[settings])
    sample = fuzz_count(BUS_SAMPLE)
    published: dict[int, bytes] = {}
    kinds = len(EVENT_MESSAGES)
    for index, message in enumerate(EVENT_MESSAGES):
        share = sample // kinds + (index < sample % kinds)
        subject = event_subject(event_type_of(message))
        for _, body in fuzzed(example(message), share, seed=index):
            if len(body) < MAX_PAYLOAD and undecodable(body):
                published[(await bus.js.publish(subject, body)).seq] = body
    handled: list[TopologyEvent] = []

    async def handle(event: TopologyEvent) -> None:
        handled.append(event)

    consumer = DurableConsumer(
        bus.js, service=SERVICE, settings=settings, decode=decode_event, handler=handle
    )
    running = asyncio.create_task(consumer.run())
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            while True:  # the server's count of what is still to deliver or to ack
                info = await bus.js.consumer_info(EVENTS_STREAM, SERVICE)
                if not info.num_pending and not info.num_ack_pending:
                    break
                await asyncio.sleep(0.2)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert handled == []
    parked = await dead_letters(bus, len(published))
    assert sorted(parked) == sorted(published)
    for seq, letter in parked.items():
        assert letter.payload == published[seq][:PARKED_PAYLOAD_LIMIT], seq
        assert letter.reason.startswith("does not decode: "), letter.reason
        assert letter.service == SERVICE
    print(f"{len(published)} malformed events parked, each with its reason")


async def dead_letters(bus: Bus, expected: int) -> dict[int, DeadLetter]:
    """The DLQ's letters by the stream sequence of the message each parks (its Nats-Msg-Id)."""
    letters: dict[int, DeadLetter] = {}
    info = await bus.js.stream_info(DLQ_STREAM)
    assert info.state.messages == expected, (info.state.messages, expected)
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        stored = await bus.js.get_msg(DLQ_STREAM, seq)
        assert stored.subject == dlq_subject(SERVICE)
        assert stored.headers is not None
        parked_seq = int(stored.headers["Nats-Msg-Id"].rsplit("-", 1)[1])
        letters[parked_seq] = msgspec.json.decode(stored.data or b"", type=DeadLetter)
    return letters
