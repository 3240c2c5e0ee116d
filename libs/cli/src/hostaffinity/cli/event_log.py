"""Reading the events stream for the operator: every event of some types (`explain`), the last
event of each type (`status`), or what `hostaffinity events` asks for (`read_events`).

Reads go by subject, so a stream full of `vm.moved` costs nothing to a question about pods: the
stream's per-subject counts say which subjects to read, an ordered consumer reads each to its
end, and the last message of a subject is one STREAM.MSG.GET. The stream is always named: the
CLI's identity may not list streams.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence

from nats.js.errors import NotFoundError

from hostaffinity.cli.event_query import EventQuery
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.replay import replay
from hostaffinity.schema import (
    EVENT_TYPES,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    UNDECODABLE,
    TopologyEvent,
    decode_event,
    event_subject,
)


async def events_of(bus: Bus, types: Sequence[str]) -> list[TopologyEvent]:
    """Every event of these types the stream holds, in stream order (oldest first)."""
    info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=f"{EVENTS_SUBJECT_PREFIX}.>")
    counts = info.state.subjects or {}
    found: list[tuple[int, TopologyEvent]] = []
    for event_type in types:
        subject = event_subject(event_type)
        if counts.get(subject):
            found.extend(await _read_subject(bus, subject))
    return [event for _, event in sorted(found, key=lambda pair: pair[0])]


async def _read_subject(bus: Bus, subject: str) -> list[tuple[int, TopologyEvent]]:
    """Every event on `subject`, with its stream sequence (the caller's timeout bounds it)."""
    read: list[tuple[int, TopologyEvent]] = []
    async for message in replay(bus.js, [subject], from_start=True):
        decoded = _decoded(subject, message.data)
        if decoded is not None:
            read.append((message.metadata.sequence.stream, decoded))
    return read


def _decoded(subject: str, data: bytes) -> TopologyEvent | None:
    """The event, or None (said on stderr) for bytes no known event decodes from."""
    try:
        return decode_event(data)
    except UNDECODABLE as error:
        print(
            f"undecodable message on {subject} ({len(data)} bytes) skipped: {str(error)[:200]}",
            file=sys.stderr,
            flush=True,
        )
        return None


async def last_of_each_type(bus: Bus) -> list[TopologyEvent]:
    """The newest event of every type the stream holds one of."""
    last: list[TopologyEvent] = []
    for event_type in EVENT_TYPES:
        try:
            message = await bus.js.get_last_msg(EVENTS_STREAM, event_subject(event_type))
        except NotFoundError:
            continue
        decoded = _decoded(event_subject(event_type), message.data or b"")
        if decoded is not None:
            last.append(decoded)
    return last


async def read_events(
    bus: Bus, query: EventQuery, *, follow: bool, from_start: bool = False
) -> AsyncIterator[TopologyEvent]:
    """The events `query` asks for, in stream order: from its start time (else from the stream's
    start with `from_start`, else from now), to the stream's end, and on with `follow`; the
    server filters by subject and time (runtime bus/replay.py), the rest is `query.matches`."""
    messages = replay(
        bus.js, query.subjects(), since=query.since, from_start=from_start, follow=follow
    )
    async for message in messages:
        event = _decoded(message.subject, message.data)
        if event is not None and query.matches(event):
            yield event
