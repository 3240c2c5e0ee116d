"""What `hostaffinity events` asks the stream for: event types (the subjects the consumer is
filtered to), a start time (where the consumer starts), and the objects an event must name.

The type and time go to the server, so reading an hour of one type out of a week of all types
costs that hour of that type. An object filter (`--pod`, `--node`, `--host`) also narrows the
subjects to the types that can name such an object, and the rest is checked here.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from hostaffinity.schema import (
    EVENT_TYPES,
    EVENTS_SUBJECT_PREFIX,
    TopologyEvent,
    event_subject,
)
from hostaffinity.schema.events import EVENT_MESSAGES, event_type_of

_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# The fields that name each kind of object, in any event that has them.
POD_FIELDS: Final = ("pod", "pods")
NODE_FIELDS: Final = ("node",)
HOST_FIELDS: Final = ("host_name", "from_host_name", "to_host_name")


def parse_since(text: str, now: datetime.datetime) -> datetime.datetime:
    """`90s`, `15m`, `2h`, `7d`, `1w` (before `now`) or an ISO 8601 time (UTC unless it says)."""
    if match := _DURATION.fullmatch(text.strip()):
        return now - datetime.timedelta(seconds=float(match[1]) * _SECONDS[match[2]])
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a duration (90s, 15m, 2h, 7d, 1w) or a time "
            "(2026-11-25T10:00:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _types_naming(fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        event_type_of(message)
        for message in EVENT_MESSAGES
        if set(message.__struct_fields__) & set(fields)
    )


@dataclass(frozen=True)
class EventQuery:
    """Which events to show; empty means any."""

    types: tuple[str, ...] = ()
    since: datetime.datetime | None = None
    pod: str | None = None
    node: str | None = None
    host: str | None = None

    def __post_init__(self) -> None:
        unknown = [t for t in self.types if t not in EVENT_TYPES]
        if unknown:
            raise ValueError(
                f"unknown event types {', '.join(unknown)}; the types are {', '.join(EVENT_TYPES)}"
            )
        if self.pod is not None and self.pod.count("/") != 1:
            raise ValueError(f"--pod {self.pod!r}: give NAMESPACE/NAME")

    def event_types(self) -> tuple[str, ...]:
        """The types to read: those asked for (all if none) that can name every object asked
        for."""
        chosen = self.types or EVENT_TYPES
        for wanted, fields in ((self.pod, POD_FIELDS), (self.node, NODE_FIELDS)):
            if wanted is not None:
                chosen = tuple(t for t in chosen if t in _types_naming(fields))
        if self.host is not None:
            chosen = tuple(t for t in chosen if t in _types_naming(HOST_FIELDS))
        return chosen

    def subjects(self) -> list[str]:
        types = self.event_types()
        if set(types) == set(EVENT_TYPES):
            return [f"{EVENTS_SUBJECT_PREFIX}.>"]
        return [event_subject(t) for t in types]

    def matches(self, event: TopologyEvent) -> bool:
        fields: dict[str, Any] = msgspec.structs.asdict(event)
        return (
            _names(fields, POD_FIELDS, self.pod)
            and _names(fields, NODE_FIELDS, self.node)
            and _names_host(fields, self.host)
        )


def _names(fields: dict[str, Any], names: tuple[str, ...], wanted: str | None) -> bool:
    if wanted is None:
        return True
    for name in names:
        value = fields.get(name)
        if value == wanted or (isinstance(value, list) and wanted in value):
            return True
    return False


def _names_host(fields: dict[str, Any], wanted: str | None) -> bool:
    """A host named bare, or `<vcenter>/<host>` as the commands print it with several vCenters
    (host names repeat across vCenters)."""
    if wanted is not None and "/" in wanted:
        vcenter, _, host = wanted.rpartition("/")
        if fields.get("vcenter") == vcenter and _names(fields, HOST_FIELDS, host):
            return True
    return _names(fields, HOST_FIELDS, wanted)


_COMMON: Final = frozenset({"id", "schema_version", "occurred_at", "source"})
_OBJECT_WIDTH: Final = 36


def table_header() -> str:
    return f"{'TIME':<20}  {'TYPE':<23}  {'OBJECT':<{_OBJECT_WIDTH}}  DETAILS"


def table_row(event: TopologyEvent) -> str:
    """One line: when, what, about which object, and the event's own fields."""
    fields: dict[str, Any] = msgspec.structs.asdict(event)
    about = next(
        (str(fields[name]) for name in ("pod", "node", "vmi", "name") if fields.get(name)), ""
    )
    details = " ".join(
        f"{key}={_short(value)}"
        for key, value in fields.items()
        if key not in _COMMON and value not in ("", [], {}, None) and str(value) != about
    )
    when = event.occurred_at[:19].replace("T", " ")
    return f"{when:<20}  {event_type_of(type(event)):<23}  {about:<{_OBJECT_WIDTH}}  {details}"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."
