"""Outside subscribers on the shipped bus (three servers, TLS, tests/platform/nats_cluster.py):
`hostaffinity bus subscriber add` gives one an identity that reads only its event types through
its own durable consumer, and refuses it everything else (the permission-probe style of
test_bus_permissions.py: each refusal is the server's `Permissions Violation`); add and remove
reload the servers, which keep running (same pids) and keep their clients.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path

import nats.errors
import pytest

from hostaffinity.runtime.layout import DESCHEDULER_CONSUMER, TOPOLOGY_STREAM
from hostaffinity.schema import DLQ_STREAM, EVENTS_STREAM, event_subject
from tests.integration.cli_runner import exit_code
from tests.platform.bus_probe import REPLY_SECONDS, Session, session
from tests.platform.nats_cluster import NatsCluster


def _pids(cluster: NatsCluster) -> list[int]:
    return [int(path.read_text()) for path in cluster.pid_files]


async def subscriber(
    cluster: NatsCluster, capsys: pytest.CaptureFixture[str], verb: str, *argv: str
) -> tuple[int, str]:
    """`hostaffinity bus subscriber VERB ...` against the cluster; exit code and stdout."""
    capsys.readouterr()
    code = await asyncio.to_thread(exit_code, cluster.subscriber_command(verb, *argv))
    return code, capsys.readouterr().out


async def publish(cluster: NatsCluster, identity: str, event_types: Sequence[str]) -> None:
    async with cluster.connection(identity) as bus:
        for event_type in event_types:
            await bus.js.publish(event_subject(event_type), b'{"type": "%s"}' % event_type.encode())


async def test_a_subscriber_reads_its_types_through_its_consumer_and_nothing_else(
    nats_cluster: NatsCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await subscriber(
        nats_cluster, capsys, "add", "audit", "--events", "pod.evicted,vm.moved"
    )
    assert code == 0, out
    seed = nats_cluster.credentials_dir / "subscribers" / "audit.nk"
    assert f"seed: {seed}" in out
    await publish(nats_cluster, "node-labeller", ["vm.moved", "node.placed"])
    await publish(nats_cluster, "descheduler", ["pod.evicted"])

    async with session(nats_cluster, "audit", seed) as audit:
        pull = await audit.nc.jetstream().pull_subscribe_bind("audit", stream=EVENTS_STREAM)
        messages = await pull.fetch(10, timeout=REPLY_SECONDS)
        assert [m.subject for m in messages] == [
            event_subject("vm.moved"),
            event_subject("pod.evicted"),
        ]
        for message in messages:
            await message.ack_sync(timeout=REPLY_SECONDS)  # the server confirms each ack
        await _refused_everything_else(audit)

    # The table the file repeats still holds for hostaffinity's own identities.
    async with session(nats_cluster, "cli") as cli:
        info = await cli.api(f"$JS.API.STREAM.INFO.{EVENTS_STREAM}")
        assert "error" not in info, info
        assert await cli.publish_refused(f"$JS.API.CONSUMER.MSG.NEXT.{EVENTS_STREAM}.audit")
    code, out = await subscriber(nats_cluster, capsys, "list")
    assert out.split("\t")[:2] == ["audit", "pod.evicted,vm.moved"]


async def _refused_everything_else(audit: Session) -> None:
    api = "$JS.API"
    for subject in (
        f"{api}.CONSUMER.CREATE.{EVENTS_STREAM}",  # an ephemeral consumer would read everything
        f"{api}.CONSUMER.CREATE.{EVENTS_STREAM}.audit",  # nor may it widen its own filter
        f"{api}.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.audit",
        f"{api}.CONSUMER.DELETE.{EVENTS_STREAM}.audit",
        f"{api}.CONSUMER.MSG.NEXT.{EVENTS_STREAM}.{DESCHEDULER_CONSUMER.durable}",
        f"$JS.ACK.{EVENTS_STREAM}.{DESCHEDULER_CONSUMER.durable}.1.1.1.1.0",
        f"{api}.STREAM.INFO.{EVENTS_STREAM}",
        f"{api}.STREAM.MSG.GET.{EVENTS_STREAM}",
        f"{api}.DIRECT.GET.{EVENTS_STREAM}",
        f"{api}.STREAM.PURGE.{EVENTS_STREAM}",
        f"{api}.STREAM.INFO.{DLQ_STREAM}",
        f"{api}.CONSUMER.CREATE.{TOPOLOGY_STREAM}",
        f"{api}.STREAM.NAMES",
        f"{api}.INFO",
        event_subject("vm.moved"),
        "$KV.hostaffinity-topology.node.x",
    ):
        assert await audit.publish_refused(subject), subject
    for subject in ("hostaffinity.events.>", "_INBOX_cli.>", ">"):
        assert await audit.subscribe_refused(subject), subject


async def test_subscribers_are_added_and_removed_without_restarting_the_bus(
    nats_cluster: NatsCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pids = _pids(nats_cluster)
    async with nats_cluster.connection("descheduler") as service:
        code, out = await subscriber(nats_cluster, capsys, "add", "cmdb", "--events", "vm.moved")
        assert code == 0, out
        seed = nats_cluster.credentials_dir / "subscribers" / "cmdb.nk"
        kept = tmp_path / "cmdb.nk"
        shutil.copy(seed, kept)
        await publish(nats_cluster, "node-labeller", ["vm.moved"])
        async with session(nats_cluster, "cmdb", seed) as cmdb:
            pull = await cmdb.nc.jetstream().pull_subscribe_bind("cmdb", stream=EVENTS_STREAM)
            [message] = await pull.fetch(1, timeout=REPLY_SECONDS)
            await message.ack_sync(timeout=REPLY_SECONDS)

        code, out = await subscriber(nats_cluster, capsys, "remove", "cmdb")
        assert code == 0, out
        assert not seed.exists()
        async with session(nats_cluster, "cli") as cli:
            gone = await cli.api(f"$JS.API.CONSUMER.INFO.{EVENTS_STREAM}.cmdb")
            assert "consumer not found" in str(gone).lower(), gone
        with pytest.raises((nats.errors.Error, OSError)):
            async with session(nats_cluster, "cmdb", kept):
                pass
        # The servers reloaded; nobody restarted, and a service's connection never dropped.
        assert _pids(nats_cluster) == pids
        assert all(server.running for server in nats_cluster.servers)
        assert service.nc.is_connected
        assert service.nc.stats["reconnects"] == 0
    code, out = await subscriber(nats_cluster, capsys, "list")
    assert out == ""
