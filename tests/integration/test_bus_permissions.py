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
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats
import nats.errors

from hostaffinity.cli.bus_access import IDENTITY_NAMES
from hostaffinity.cli.bus_credentials import new_user_seed
from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM
from hostaffinity.runtime.bus.layout import DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.schema import DLQ_STREAM, EVENTS_STREAM, TOPOLOGY_BUCKET
from tests.platform.bus_probe import REPLY_SECONDS, session, tls_context
from tests.platform.nats_cluster import NatsCluster, client_limit

# JetStream's error codes (nats-server server/errors.json): a roll-up on a stream that does not
# allow them ("rollup not permitted"), and a durable name sent to the ephemeral create subject.
ROLLUP_REFUSED = 10111
EPHEMERAL_WITH_DURABLE_NAME = 10020
STREAM_NOT_FOUND = 10059
OUR_STREAMS = (EVENTS_STREAM, DLQ_STREAM, TOPOLOGY_STREAM, DRS_STREAM)
SERVICES = (
    "node-labeller",
    "drs-translator",
    "admission-webhook",
    "scheduler-extender",
    "descheduler",
)


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
        "descheduler": {TOPOLOGY_STREAM, EVENTS_STREAM},
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
        # Provisioning makes our layout, nothing else: no other stream, no consumer.
        assert await provision.publish_refused("$JS.API.STREAM.CREATE.SOMETHING_ELSE")
        assert await provision.publish_refused(
            f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.hostaffinity-descheduler"
        )
    for identity in (*SERVICES, "cli"):
        async with session(nats_cluster, identity) as bus:
            for subject in (
                f"$JS.API.STREAM.CREATE.{EVENTS_STREAM}",
                f"$JS.API.STREAM.UPDATE.{TOPOLOGY_STREAM}",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.{identity}",
                f"$JS.API.CONSUMER.DELETE.{EVENTS_STREAM}.audit",
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
                    ack = await bus.store(subject, b"{}")
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
                    assert (await bus.store(subject, b"{}"))["stream"] == EVENTS_STREAM
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
        "descheduler": {TOPOLOGY_STREAM, EVENTS_STREAM},  # its predecessor's evictions
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


def services_reading_the_fleet_view() -> set[str]:
    """The services whose code reads the fleet view (follows it, or opens its bucket)."""
    root = Path(__file__).resolve().parents[2] / "services"
    return {
        service.name
        for service in root.iterdir()
        if any(
            "follow_fleet_view(" in text or "key_value(FLEET_BUCKET)" in text
            for text in (path.read_text() for path in (service / "src").rglob("*.py"))
        )
    }


async def test_the_fleet_view_is_read_by_the_services_that_use_it_and_no_other(
    nats_cluster: NatsCluster,
) -> None:
    """Every service that reads `hostaffinity-fleet` may watch it (a consumer on its stream: the
    server answers, here that it has no such stream), the CLI too; the node-labeller, which
    never reads it, and provisioning, which only makes it, may not."""
    readers = {"drs-translator", "admission-webhook", "scheduler-extender", "descheduler"}
    assert services_reading_the_fleet_view() == readers
    subject = f"$JS.API.CONSUMER.CREATE.{FLEET_STREAM}"
    for identity in IDENTITY_NAMES:
        async with session(nats_cluster, identity) as bus:
            request = {
                "stream_name": FLEET_STREAM,
                "config": {"deliver_subject": bus.nc.new_inbox(), "ack_policy": "none"},
            }
            if identity in readers | {"cli"}:
                answer = await bus.api(subject, request)
                assert answer["error"]["err_code"] == STREAM_NOT_FOUND, (identity, answer)
            else:
                assert await bus.publish_refused(subject, json.dumps(request).encode()), identity


async def test_the_descheduler_reads_the_events_stream_only_through_ephemeral_consumers(
    nats_cluster: NatsCluster,
) -> None:
    """It learns of a vMotion from the topology KV (descheduler/feeds.py says why) and reads
    back its predecessor's evictions with an ordered consumer (descheduler/cooldowns.py), so it
    may neither fetch from nor ack a durable consumer of the events stream; it parks what its
    topology watch cannot decode in its own DLQ subject, and in no other service's."""
    async with session(nats_cluster, "descheduler") as descheduler:
        for subject in (
            f"$JS.API.CONSUMER.MSG.NEXT.{EVENTS_STREAM}.hostaffinity-descheduler",
            f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.hostaffinity-descheduler",
            f"$JS.ACK.{EVENTS_STREAM}.hostaffinity-descheduler.1.1.1.1.0",
            f"$JS.ACK._.HASH.{EVENTS_STREAM}.hostaffinity-descheduler.1.1.1.1.0",
            "hostaffinity.dlq.drs-translator",
        ):
            assert await descheduler.publish_refused(subject), subject
        stored = await descheduler.store("hostaffinity.dlq.descheduler", b"{}")
        assert stored.get("stream") == DLQ_STREAM, stored


async def test_anonymous_unknown_and_plaintext_clients_are_refused(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    tls = tls_context(nats_cluster)
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


async def test_no_writer_can_wipe_its_bucket_with_a_rollup_but_deletes_work(
    nats_cluster: NatsCluster,
) -> None:
    """`Nats-Rollup: all` on any key would leave one message of the whole bucket, history
    included; `sub` is the KV purge of a key. The bucket streams refuse both; a delete marker
    (what the services write) is stored."""
    writers = {
        "node-labeller": (TOPOLOGY_STREAM, "$KV.hostaffinity-topology.node."),
        "drs-translator": (DRS_STREAM, "$KV.hostaffinity-drs.rule.vcsim.domain-c7."),
    }
    for identity, (stream, prefix) in writers.items():
        async with session(nats_cluster, identity) as bus:
            for index in range(3):
                stored = await bus.store(f"{prefix}key-{index}", b"{}")
                assert "seq" in stored, (identity, stored)
            before = await bus.stream_messages(stream)
            for rollup in ("all", "sub"):
                answer = await bus.store(f"{prefix}key-0", b"", {"Nats-Rollup": rollup})
                assert answer.get("error", {}).get("err_code") == ROLLUP_REFUSED, (
                    identity,
                    rollup,
                    answer,
                )
            assert await bus.stream_messages(stream) == before, identity
            deleted = await bus.store(f"{prefix}key-1", b"", {"KV-Operation": "DEL"})
            assert "seq" in deleted, (identity, deleted)


async def test_no_identity_creates_a_durable_consumer_not_even_the_cli(
    nats_cluster: NatsCluster,
) -> None:
    """Readers create ephemeral consumers only (server state that goes away with them): the
    named and durable create subjects are refused, and the ephemeral one refuses a durable name
    (JetStream error 10020)."""
    readers = {
        "node-labeller": TOPOLOGY_STREAM,
        "drs-translator": DRS_STREAM,
        "scheduler-extender": TOPOLOGY_STREAM,
        "descheduler": TOPOLOGY_STREAM,
        "cli": EVENTS_STREAM,
    }
    for identity, stream in readers.items():
        async with session(nats_cluster, identity) as bus:
            durable = {"durable_name": f"{identity}-kept", "ack_policy": "explicit"}
            request = json.dumps({"stream_name": stream, "config": durable}).encode()
            for subject in (
                f"$JS.API.CONSUMER.CREATE.{stream}.{identity}-kept",
                f"$JS.API.CONSUMER.CREATE.{stream}.{identity}-kept.>",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{identity}-kept",
            ):
                assert await bus.publish_refused(subject, request), (identity, subject)
            answer = await bus.api(
                f"$JS.API.CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": durable}
            )
            assert answer.get("error", {}).get("err_code") == EPHEMERAL_WITH_DURABLE_NAME, (
                identity,
                answer,
            )


async def test_a_push_consumer_into_another_identitys_inbox_is_not_refused_by_the_server(
    nats_cluster: NatsCluster,
) -> None:
    """What nats-server 2.15.1 cannot refuse: a consumer's deliver subject is checked for being
    literal, valid and outside its own stream (server/consumer.go), never against its creator's
    permissions, so a reader's push consumer delivers into any subscription of the account,
    another identity's inbox included. Where it does deliver: only to a subscription whose
    subject the creator knows, and nothing tells it one: inbox names are random, the consumer
    lists (which show deliver subjects) are refused, and /connz listens on loopback only.
    Should a release start checking, this fails: then tighten docs/bus.md."""
    async with (
        session(nats_cluster, "descheduler") as victim,
        session(nats_cluster, "scheduler-extender") as creator,
    ):
        inbox = victim.nc.new_inbox()
        received = await victim.nc.subscribe(inbox)
        await victim.nc.flush()
        async with nats_cluster.connection("node-labeller") as labeller:
            bucket = await labeller.js.key_value(TOPOLOGY_BUCKET)
            await bucket.put("node.worker-1", b"{}")
        request = {"stream_name": TOPOLOGY_STREAM, "config": {"deliver_subject": inbox}}
        created = await creator.api(f"$JS.API.CONSUMER.CREATE.{TOPOLOGY_STREAM}", request)
        assert "error" not in created, created
        # The stream's message, in the descheduler's subscription it never asked for.
        pushed = await received.next_msg(timeout=REPLY_SECONDS)
        assert (pushed.subject, pushed.data) == ("$KV.hostaffinity-topology.node.worker-1", b"{}")
        for identity in IDENTITY_NAMES:
            async with session(nats_cluster, identity) as bus:
                for verb in ("LIST", "NAMES"):
                    subject = f"$JS.API.CONSUMER.{verb}.{TOPOLOGY_STREAM}"
                    assert await bus.publish_refused(subject), (identity, subject)


async def test_a_connection_past_the_subscription_limit_is_cut_off(
    nats_cluster: NatsCluster,
) -> None:
    """nats-server's config-file users have no limits of their own: cluster.conf bounds every
    connection's subscriptions (what each service uses: tests/e2e/test_bus_cluster.py)."""
    limit = client_limit("max_subscriptions")
    async with session(nats_cluster, "cli") as bus:
        for _ in range(limit + 1):
            await bus.nc.subscribe(bus.nc.new_inbox())
        with contextlib.suppress(nats.errors.Error):
            await bus.nc.flush()
        # The server's -ERR closes the connection (nats-py keeps it as the last error).
        await asyncio.wait_for(bus.closed.wait(), REPLY_SECONDS)
        assert "maximum subscriptions exceeded" in str(bus.nc.last_error).lower()
