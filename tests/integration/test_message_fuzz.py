"""Every message decoder under malformed bytes at volume (tests/platform/fuzz_inputs.py, from a
valid document of each type: tests/platform/schema_examples.py).

In process, per event type and per KV value: decoding either gives the type or raises one of
UNDECODABLE, what every reader catches (the consumer, the topology watch and snapshot, the
drs-translator's loaders), never anything else. It found invalid UTF-8 (UnicodeDecodeError) and
deep nesting (RecursionError) in KV values, which the KV readers did not catch. Through a real
nats-server: what reads the events stream back (the CLI, a new descheduler leader's cooldowns)
skips every malformed event, the CLI saying so, and reads the valid ones around them.
`FUZZ_INPUTS=10000` runs the full count through the bus too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from nats.js.kv import KeyValue

from hostaffinity.cli.event_log import events_of
from hostaffinity.descheduler.cooldowns import inherit_cooldowns
from hostaffinity.descheduler.core.eviction_planner import EvictionPlanner, PlannerSettings
from hostaffinity.descheduler.core.policy import EvictionLimits
from hostaffinity.descheduler.executor import EVICTED
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import topology_change
from hostaffinity.schema import (
    EVENT_MESSAGES,
    EVENT_TYPES,
    UNDECODABLE,
    DrsOwnership,
    EsxiHost,
    NodePlacement,
    PodEvicted,
    TopologyEvent,
    decode_event,
    event_subject,
    event_type_of,
    utc_timestamp,
)
from tests.platform.fuzz_inputs import FULL_RUN, fuzz_count, fuzzed
from tests.platform.schema_examples import example

# Over the bus each input is two publishes and an ack: a sample in CI, the full run on demand.
BUS_SAMPLE = 1_000
# What nats-server accepts in one message (max_payload, 1 MiB in the shipped configs).
MAX_PAYLOAD = 1024 * 1024
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


def evicted_now(owner: str) -> PodEvicted:
    """A valid pod.evicted a new descheduler leader inherits a cooldown from."""
    evicted = msgspec.convert(example(PodEvicted), PodEvicted)
    return msgspec.structs.replace(
        evicted, id=f"fuzz-{owner}", result=EVICTED, owner=owner, occurred_at=utc_timestamp()
    )


async def test_the_events_readers_skip_every_malformed_event_and_read_the_valid_ones(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    """What reads the events stream back -- the CLI (`events_of`: explain, events) and a new
    descheduler leader's cooldowns -- meets the sample of malformed events (every type's
    subject) between valid ones, and reads each valid one and nothing else."""
    sample = fuzz_count(BUS_SAMPLE)
    kinds = len(EVENT_MESSAGES)
    malformed = 0
    valid: list[TopologyEvent] = [evicted_now("default/ReplicaSet/first")]
    await bus.publish_event(valid[0])
    for index, message in enumerate(EVENT_MESSAGES):
        share = sample // kinds + (index < sample % kinds)
        subject = event_subject(event_type_of(message))
        for _, body in fuzzed(example(message), share, seed=index):
            if len(body) < MAX_PAYLOAD and undecodable(body):
                await bus.js.publish(subject, body)
                malformed += 1
    valid.append(evicted_now("default/ReplicaSet/last"))
    await bus.publish_event(valid[1])
    capsys.readouterr()

    async with asyncio.timeout(DRAIN_SECONDS):
        read = await events_of(bus, list(EVENT_TYPES))
    reported = capsys.readouterr().err.splitlines()
    planner = EvictionPlanner(PlannerSettings(), EvictionLimits())
    async with asyncio.timeout(DRAIN_SECONDS):
        inherited = (await inherit_cooldowns(bus.js, planner, 300.0, datetime.now(UTC))).inherited

    assert read == valid
    assert len(reported) == malformed
    assert all(line.startswith("undecodable message on hostaffinity.events.") for line in reported)
    assert inherited == 2
    assert planner.cooling("default/ReplicaSet/first")
    assert planner.cooling("default/ReplicaSet/last")
    print(f"{malformed} malformed events skipped by every reader, each reported by the CLI")
