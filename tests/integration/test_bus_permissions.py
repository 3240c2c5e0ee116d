"""The permission matrix, enforced by a real nats-server: the shipped cluster (cluster.conf and
auth.conf from k8s/base/nats), each identity with its own nkey.

For every identity, what it must do succeeds (the server answers) and a listed set of what it
must not do is refused by the server: it answers `Permissions Violation` naming the subject. A
publish the server refuses gets no reply, so each refusal is read from the server's error, never
inferred from a silence; each allowance is a reply. Consumer creation is checked on its own
because it bypasses subscribe permissions (a consumer pushes to any subject it is given).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client

from hostaffinity.cli.bus_access import IDENTITY_NAMES
from hostaffinity.cli.bus_credentials import new_user_seed
from hostaffinity.runtime.layout import DESCHEDULER_CONSUMER, DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.schema import DLQ_STREAM, EVENTS_STREAM
from tests.platform.nats_cluster import NatsCluster

REPLY_SECONDS = 3.0
OUR_STREAMS = (EVENTS_STREAM, DLQ_STREAM, TOPOLOGY_STREAM, DRS_STREAM)
SERVICES = (
    "node-labeller",
    "drs-translator",
    "admission-webhook",
    "scheduler-extender",
    "descheduler",
)


@dataclass
class Session:
    """One identity's connection, with the server's errors as they arrive."""

    nc: Client
    identity: str
    errors: list[str] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

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

    async def publish_refused(self, subject: str, payload: bytes = b"{}") -> bool:
        """Publish with a reply inbox (as a JetStream request does) and expect the refusal."""
        await self.nc.publish(subject, payload, reply=self.nc.new_inbox())
        await self.nc.flush()
        return await self.refused(subject)

    async def subscribe_refused(self, subject: str) -> bool:
        await self.nc.subscribe(subject)
        await self.nc.flush()
        return await self.refused(subject)


def _names(error: str, subject: str) -> bool:
    lowered = error.lower()  # nats-py reports the server's -ERR in lower case
    return "permissions violation" in lowered and f'"{subject.lower()}"' in lowered


def _tls(cluster: NatsCluster) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cluster.tls_dir / "ca.crt"))


@contextlib.asynccontextmanager
async def session(cluster: NatsCluster, identity: str) -> AsyncIterator[Session]:
    settings = cluster.settings(identity)
    nc = Client()
    opened = Session(nc, identity)
    await nc.connect(
        settings.servers,
        nkeys_seed=settings.nkey_seed_file,
        inbox_prefix=settings.inbox_prefix,
        tls=_tls(cluster),
        error_cb=opened.note,
        allow_reconnect=False,
        max_reconnect_attempts=0,
    )
    try:
        yield opened
    finally:
        await nc.close()


async def connect_error(servers: list[str], **options: object) -> str:
    """The error a connection attempt ends with; the test fails if it is accepted."""
    errors: list[str] = []

    async def note(error: Exception) -> None:
        errors.append(str(error))

    try:
        nc = await nats.connect(
            servers, error_cb=note, allow_reconnect=False, max_reconnect_attempts=0, **options
        )
    except (nats.errors.Error, OSError, ssl.SSLError) as refused:
        return " ".join([str(refused), *errors])
    await nc.close()
    raise AssertionError(f"the server accepted a connection with {sorted(options)}")


async def test_every_identity_reads_the_streams_it_uses_and_none_but_provision_deletes(
    nats_cluster: NatsCluster,
) -> None:
    readable = {
        "node-labeller": {TOPOLOGY_STREAM, EVENTS_STREAM},
        "drs-translator": {TOPOLOGY_STREAM, DRS_STREAM, EVENTS_STREAM},
        "admission-webhook": set(),
        "scheduler-extender": {TOPOLOGY_STREAM, EVENTS_STREAM},
        "descheduler": {TOPOLOGY_STREAM, EVENTS_STREAM, DLQ_STREAM},
        "cli": set(OUR_STREAMS),
        "provision": set(OUR_STREAMS),
    }
    for identity in IDENTITY_NAMES:
        async with session(nats_cluster, identity) as bus:
            for stream in sorted(readable[identity]):
                info = await bus.api(f"$JS.API.STREAM.INFO.{stream}")
                assert "error" not in info, (identity, stream, info)
            for stream in OUR_STREAMS:
                # Provisioning deletes our streams at uninstall; nobody purges.
                verbs = ("PURGE",) if identity == "provision" else ("DELETE", "PURGE")
                for verb in verbs:
                    subject = f"$JS.API.STREAM.{verb}.{stream}"
                    assert await bus.publish_refused(subject), (identity, subject)
            for stream in sorted(set(OUR_STREAMS) - readable[identity]):
                subject = f"$JS.API.STREAM.INFO.{stream}"
                assert await bus.publish_refused(subject), (identity, subject)


async def test_only_provisioning_creates_or_updates_the_layout(nats_cluster: NatsCluster) -> None:
    async with session(nats_cluster, "provision") as provision:
        info = await provision.api(f"$JS.API.STREAM.INFO.{EVENTS_STREAM}")
        config = info["config"]
        updated = await provision.api(f"$JS.API.STREAM.UPDATE.{EVENTS_STREAM}", config)
        assert "error" not in updated, updated
        durable = DESCHEDULER_CONSUMER
        consumer = await provision.api(f"$JS.API.CONSUMER.INFO.{durable.stream}.{durable.durable}")
        assert "error" not in consumer, consumer
        # Provisioning makes our layout, nothing else.
        assert await provision.publish_refused("$JS.API.STREAM.CREATE.SOMETHING_ELSE")
    for identity in (*SERVICES, "cli"):
        async with session(nats_cluster, identity) as bus:
            for subject in (
                f"$JS.API.STREAM.CREATE.{EVENTS_STREAM}",
                f"$JS.API.STREAM.UPDATE.{TOPOLOGY_STREAM}",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.{identity}",
                f"$JS.API.CONSUMER.DELETE.{EVENTS_STREAM}.{DESCHEDULER_CONSUMER.durable}",
            ):
                assert await bus.publish_refused(subject), (identity, subject)


async def test_only_the_labeller_writes_the_topology_and_only_the_translator_the_drs_records(
    nats_cluster: NatsCluster,
) -> None:
    writes = {
        "node-labeller": "$KV.hostaffinity-topology.node.worker-1",
        "drs-translator": "$KV.hostaffinity-drs.rule.vcsim.domain-c7.hostaffinity-anti-1",
    }
    for identity in IDENTITY_NAMES:
        async with session(nats_cluster, identity) as bus:
            for writer, subject in writes.items():
                if identity == writer:
                    ack = json.loads(
                        (await bus.nc.request(subject, b"{}", timeout=REPLY_SECONDS)).data
                    )
                    assert "seq" in ack, (identity, ack)  # stored: the stream acked it
                else:
                    assert await bus.publish_refused(subject), (identity, subject)


async def test_each_service_publishes_only_its_own_event_types(nats_cluster: NatsCluster) -> None:
    own = {
        "node-labeller": "vm.moved",
        "drs-translator": "drs.rules.applied",
        "admission-webhook": "pod.mutated",
        "scheduler-extender": "extender.decision",
        "descheduler": "pod.evicted",
    }
    for identity in (*SERVICES, "cli", "provision"):
        async with session(nats_cluster, identity) as bus:
            for owner, event_type in own.items():
                subject = f"hostaffinity.events.{event_type}"
                if identity == owner:
                    reply = await bus.nc.request(subject, b"{}", timeout=REPLY_SECONDS)
                    assert json.loads(reply.data)["stream"] == EVENTS_STREAM
                else:
                    assert await bus.publish_refused(subject), (identity, subject)


async def test_no_identity_reads_another_inbox_or_the_api_wholesale(
    nats_cluster: NatsCluster,
) -> None:
    for identity in IDENTITY_NAMES:
        others = [name for name in IDENTITY_NAMES if name != identity]
        async with session(nats_cluster, identity) as bus:
            for subject in (
                *(f"_INBOX_{other}.>" for other in others),
                f"_INBOX_{others[-1]}.x",
                "_INBOX.>",
                "$JS.API.>",
                "hostaffinity.events.>",
                ">",
            ):
                assert await bus.subscribe_refused(subject), (identity, subject)


async def test_consumers_only_on_streams_an_identity_may_read(nats_cluster: NatsCluster) -> None:
    """Consumer creation bypasses subscribe permissions: a consumer on the events stream pushed
    to the creator's own inbox would read every event, so only readers may create one."""
    may_create_on = {
        "node-labeller": {TOPOLOGY_STREAM},
        "drs-translator": {TOPOLOGY_STREAM, DRS_STREAM},
        "admission-webhook": set(),
        "scheduler-extender": {TOPOLOGY_STREAM},
        "descheduler": {TOPOLOGY_STREAM},
        "cli": {TOPOLOGY_STREAM, DRS_STREAM, EVENTS_STREAM},
        "provision": {DRS_STREAM},  # the ownership records, read at uninstall
    }
    for identity in IDENTITY_NAMES:
        async with session(nats_cluster, identity) as bus:
            for stream in OUR_STREAMS:
                deliver = bus.nc.new_inbox()
                request = {
                    "stream_name": stream,
                    "config": {"deliver_subject": deliver, "ack_policy": "none"},
                }
                subject = f"$JS.API.CONSUMER.CREATE.{stream}"
                if stream in may_create_on[identity]:
                    created = await bus.api(subject, request)
                    assert "error" not in created, (identity, stream, created)
                else:
                    assert await bus.publish_refused(subject, json.dumps(request).encode()), (
                        identity,
                        stream,
                    )


async def test_the_descheduler_reads_and_acks_only_its_durable_consumer_in_both_ack_forms(
    nats_cluster: NatsCluster,
) -> None:
    durable = DESCHEDULER_CONSUMER
    async with session(nats_cluster, "node-labeller") as labeller:
        await labeller.nc.request("hostaffinity.events.vm.moved", b"{}", timeout=REPLY_SECONDS)
    async with session(nats_cluster, "descheduler") as descheduler:
        js = descheduler.nc.jetstream()
        subscription = await js.pull_subscribe_bind(durable.durable, stream=durable.stream)
        [message] = await subscription.fetch(1, timeout=REPLY_SECONDS)
        await message.ack_sync(timeout=REPLY_SECONDS)  # the server confirms the ack
        # The ack subject with domain and account hash, which later servers send (ADR-15).
        later_form = f"$JS.ACK._.HASH.{durable.stream}.{durable.durable}.1.1.1.1.0"
        await descheduler.nc.publish(later_form, b"+ACK")
        await descheduler.nc.flush()
        with pytest.raises(TimeoutError):
            await descheduler.refused(later_form)
        for subject in (
            f"$JS.API.CONSUMER.MSG.NEXT.{EVENTS_STREAM}.someone-else",
            f"$JS.ACK.{EVENTS_STREAM}.someone-else.1.1.1.1.0",
            f"$JS.ACK._.HASH.{EVENTS_STREAM}.someone-else.1.1.1.1.0",
        ):
            assert await descheduler.publish_refused(subject), subject
    async with session(nats_cluster, "cli") as cli:
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{durable.stream}.{durable.durable}"
        assert await cli.publish_refused(subject)


async def test_anonymous_unknown_and_plaintext_clients_are_refused(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    tls = _tls(nats_cluster)
    anonymous = await connect_error(nats_cluster.urls, tls=tls)
    assert "authorization violation" in anonymous.lower(), anonymous
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(new_user_seed())
    unknown = await connect_error(nats_cluster.urls, tls=tls, nkeys_seed=str(stranger))
    assert "authorization violation" in unknown.lower(), unknown
    assert await plaintext_connect_is_refused(nats_cluster.ports[0].client)


async def plaintext_connect_is_refused(port: int) -> bool:
    """A client that answers the server's INFO with a plaintext CONNECT (what a client without
    TLS does) is cut off: the listener requires TLS first."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = json.loads((await reader.readline())[len(b"INFO ") :])
        assert info.get("tls_required") is True, info
        writer.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
        await writer.drain()
        answer = await _read_until_closed(reader.read)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return b"PONG" not in answer


async def _read_until_closed(read: Callable[[int], Awaitable[bytes]]) -> bytes:
    received = b""
    async with asyncio.timeout(REPLY_SECONDS * 3):
        while chunk := await read(4096):
            received += chunk
    return received
