"""Outside subscribers of the events stream: each its own nkey, allowed to read only the event
types it was given, through its own durable consumer (named after it) and its own inbox.

The servers load one `authorization` block (nats-server cannot join two `users` lists, nor
include a file inside one), so a bus with subscribers loads `subscribers.conf`, included after
auth.conf, which repeats the whole table of bus_access.py and adds the subscribers; it replaces
auth.conf's block. Without subscribers the file holds only a comment and auth.conf applies
alone. The subscribers' allowances:
- a subscriber fetches from and acks its consumer (`read_durable`) and receives replies on
  `_INBOX_<name>`; it creates no consumer (creation bypasses subscribe permissions), reads no
  stream info, publishes nothing;
- provisioning, the only identity that creates consumers for others, may create, inspect and
  delete exactly the registered subscribers' consumers, so the file names them for it too.

The registry (name, event types, public key) is `subscribers.json`; the file is rendered from
it by the release whose table it repeats, and rendered again by `bus credentials` (locally) and
`bus secrets` (Kubernetes) on every start, so an upgrade never leaves an old table loaded.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import msgspec
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from hostaffinity.cli.bus_access import (
    API,
    IDENTITIES,
    IDENTITY_NAMES,
    Identity,
    read_durable,
    render_authorization,
)
from hostaffinity.schema import EVENT_TYPES, EVENTS_STREAM, event_subject

SUBSCRIBERS_CONF: Final = "subscribers.conf"
REGISTRY_FILE: Final = "subscribers.json"
# A consumer name and an nkey user's inbox prefix at once: no dots, wildcards or spaces.
_NAME: Final = re.compile(r"[a-z][a-z0-9-]{0,47}")
# How long a delivered event may stay unacked before it is delivered again.
ACK_WAIT_SECONDS: Final = 60.0
MAX_ACK_PENDING: Final = 1000


class Subscriber(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One registered subscriber: its name (also its consumer's), its event types, the public
    half of its nkey."""

    name: str
    events: tuple[str, ...]
    public_key: str

    @property
    def subjects(self) -> list[str]:
        return [event_subject(event_type) for event_type in self.events]


def checked_name(name: str) -> str:
    """The name, or a ValueError saying why it cannot name a subscriber."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"subscriber name {name!r}: use lower-case letters, digits and '-' (at most 48), "
            "starting with a letter"
        )
    if name in IDENTITY_NAMES or name.startswith("hostaffinity"):
        raise ValueError(
            f"subscriber name {name!r} is taken by hostaffinity itself "
            f"({', '.join(IDENTITY_NAMES)}, and every name starting with hostaffinity)"
        )
    return name


def checked_event_types(listed: str) -> tuple[str, ...]:
    """`TYPE[,TYPE...]` as a tuple; every unknown type is named in one error."""
    types = tuple(dict.fromkeys(part.strip() for part in listed.split(",") if part.strip()))
    unknown = [event_type for event_type in types if event_type not in EVENT_TYPES]
    if unknown or not types:
        raise ValueError(
            f"unknown event types {', '.join(unknown) or '(none given)'}; "
            f"the types are {', '.join(EVENT_TYPES)}"
        )
    return types


def decode_registry(data: bytes) -> list[Subscriber]:
    return sorted(msgspec.json.decode(data, type=list[Subscriber]), key=lambda s: s.name)


def encode_registry(subscribers: Iterable[Subscriber]) -> bytes:
    ordered = sorted(subscribers, key=lambda s: s.name)
    return msgspec.json.format(msgspec.json.encode(ordered)) + b"\n"


def subscriber_identity(subscriber: Subscriber) -> Identity:
    """What the server lets this subscriber do: read its consumer, receive on its inbox."""
    return Identity(
        subscriber.name,
        f"outside subscriber of {', '.join(subscriber.events)}",
        tuple(read_durable(EVENTS_STREAM, subscriber.name)),
        (f"_INBOX_{subscriber.name}.>",),
    )


def _provisioning_with(subscribers: Sequence[Subscriber], provision: Identity) -> Identity:
    """Provisioning, also allowed to create, inspect and delete these subscribers' consumers."""
    extra = []
    for name in (subscriber.name for subscriber in subscribers):
        extra += [
            f"{API}.CONSUMER.CREATE.{EVENTS_STREAM}.{name}",
            f"{API}.CONSUMER.CREATE.{EVENTS_STREAM}.{name}.>",
            f"{API}.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.{name}",
            f"{API}.CONSUMER.INFO.{EVENTS_STREAM}.{name}",
            f"{API}.CONSUMER.DELETE.{EVENTS_STREAM}.{name}",
        ]
    return dataclasses.replace(
        provision, publish=tuple(dict.fromkeys((*provision.publish, *extra)))
    )


def render_subscribers_conf(subscribers: Sequence[Subscriber]) -> str:
    """subscribers.conf: a comment without subscribers, else the whole authorization block."""
    header = (
        "# Written by `hostaffinity bus subscriber` (and again by `bus credentials` / `bus\n"
        "# secrets`) from subscribers.json; do not edit. Included after auth.conf.\n"
    )
    if not subscribers:
        return header + "# No subscribers: auth.conf's authorization block applies as it is.\n"
    users = [
        (
            _provisioning_with(subscribers, who) if who.name == "provision" else who,
            f"${who.public_key_variable}",
        )
        for who in IDENTITIES
    ]
    users += [(subscriber_identity(s), s.public_key) for s in subscribers]
    return (
        header
        + "# It repeats auth.conf's identities and adds the subscribers (one authorization\n"
        + "# block is all nats-server reads; this one replaces auth.conf's).\n"
        + render_authorization(users)
    )


def consumer_config(
    subscriber: Subscriber, ack_wait_seconds: float = ACK_WAIT_SECONDS
) -> ConsumerConfig:
    """The subscriber's durable pull consumer: its types only, from the oldest event the stream
    keeps, explicit acks; an event unacked for `ack_wait_seconds` is delivered again."""
    subjects = subscriber.subjects
    return ConsumerConfig(
        name=subscriber.name,
        durable_name=subscriber.name,
        description=f"outside subscriber {subscriber.name} (hostaffinity bus subscriber)",
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_seconds,
        max_ack_pending=MAX_ACK_PENDING,
        filter_subject=subjects[0] if len(subjects) == 1 else None,
        filter_subjects=subjects if len(subjects) > 1 else None,
    )


class LocalSubscribers:
    """The registry, the servers' subscribers.conf and the seeds, in one folder."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def seed_file(self, name: str) -> Path:
        return self.directory / "subscribers" / f"{name}.nk"

    def load(self) -> list[Subscriber]:
        path = self.directory / REGISTRY_FILE
        return decode_registry(path.read_bytes()) if path.exists() else []

    def save(self, subscribers: Sequence[Subscriber]) -> None:
        """Registry, then the servers' file; each replaced whole (a reload never reads half)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        _replace(self.directory / REGISTRY_FILE, encode_registry(subscribers))
        _replace(self.directory / SUBSCRIBERS_CONF, render_subscribers_conf(subscribers).encode())


def _replace(path: Path, content: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(content)
    partial.replace(path)
