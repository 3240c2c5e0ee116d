"""Probing what a bus identity may do: a connection that records the server's errors, so a
refusal is read from the server's `Permissions Violation` naming the subject, never inferred
from a silence, and an allowance is a reply (tests/integration/test_bus_permissions.py and
test_bus_subscribers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js.client import JetStreamContext
from nats.js.errors import ServiceUnavailableError

from tests.platform.nats_cluster import NatsCluster

REPLY_SECONDS = 3.0
LEADER_SECONDS = 15.0


@dataclass
class Session:
    """One identity's connection, with the server's errors as they arrive."""

    nc: Client
    identity: str
    errors: list[str] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def note_closed(self) -> None:
        self.closed.set()

    async def note(self, error: Exception) -> None:
        self.errors.append(str(error))
        self._arrived.set()

    async def refused(self, subject: str) -> bool:
        """Whether the server reported a permissions violation for `subject`."""
        async with asyncio.timeout(REPLY_SECONDS):
            while not any(_names(error, subject) for error in self.errors):
                self._arrived.clear()
                await self._arrived.wait()
        return True

    async def api(self, subject: str, body: object = None) -> dict[str, object]:
        """A JetStream API request that must be answered (allowed); returns the reply."""
        payload = b"" if body is None else json.dumps(body).encode()
        reply = await self.nc.request(subject, payload, timeout=REPLY_SECONDS)
        answer: dict[str, object] = json.loads(reply.data)
        return answer

    async def store(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        return await store(self.nc, subject, payload, headers)

    async def stream_messages(self, stream: str) -> int:
        info = await self.api(f"$JS.API.STREAM.INFO.{stream}")
        state = info["state"]
        assert isinstance(state, dict), info
        return int(state["messages"])

    async def publish_refused(self, subject: str, payload: bytes = b"{}") -> bool:
        """Publish with a reply inbox (as a JetStream request does) and expect the refusal."""
        await self.nc.publish(subject, payload, reply=self.nc.new_inbox())
        await self.nc.flush()
        return await self.refused(subject)

    async def subscribe_refused(self, subject: str) -> bool:
        await self.nc.subscribe(subject)
        await self.nc.flush()
        return await self.refused(subject)


async def store(
    nc: Client, subject: str, payload: bytes, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Publish to a stream's subject and return its answer (a PubAck or an error). No responder
    means the stream has no leader listening yet (a just-formed cluster, or an election under
    load): asked again, for up to LEADER_SECONDS, as the services' outboxes do and as nats.go's
    JetStream publish does (it retries ErrNoResponders)."""
    async with asyncio.timeout(LEADER_SECONDS):
        while True:
            try:
                reply = await nc.request(subject, payload, timeout=REPLY_SECONDS, headers=headers)
            except NoRespondersError:
                await asyncio.sleep(0.2)
                continue
            answer: dict[str, Any] = json.loads(reply.data)
            return answer


async def first_fetch(pull: JetStreamContext.PullSubscription, batch: int) -> list[Msg]:
    """The first fetch from a consumer just made. Its leader's interest in the pull requests
    reaches the other servers a moment after the creation is answered, so a pull through one of
    them may be answered 503 (no responders) at first: asked again, for up to LEADER_SECONDS,
    as a subscriber would."""
    async with asyncio.timeout(LEADER_SECONDS):
        while True:
            try:
                return await pull.fetch(batch, timeout=REPLY_SECONDS)
            except ServiceUnavailableError:
                await asyncio.sleep(0.2)


def _names(error: str, subject: str) -> bool:
    lowered = error.lower()  # nats-py reports the server's -ERR in lower case
    return "permissions violation" in lowered and f'"{subject.lower()}"' in lowered


def tls_context(cluster: NatsCluster) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cluster.tls_dir / "ca.crt"))


@contextlib.asynccontextmanager
async def session(
    cluster: NatsCluster, identity: str, seed_file: Path | None = None
) -> AsyncIterator[Session]:
    """A connection as `identity` (its seed from the cluster's credentials unless given), its
    replies on `_INBOX_<identity>`, the server's errors recorded."""
    nc = Client()
    opened = Session(nc, identity)
    await nc.connect(
        cluster.urls,
        nkeys_seed=str(seed_file or cluster.seeds[identity]),
        inbox_prefix=f"_INBOX_{identity}",
        tls=tls_context(cluster),
        error_cb=opened.note,
        closed_cb=opened.note_closed,
        allow_reconnect=False,
        max_reconnect_attempts=0,
    )
    try:
        yield opened
    finally:
        await nc.close()
