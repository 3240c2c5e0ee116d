"""Outside subscribers on the shipped bus (three servers, TLS, tests/platform/nats_cluster.py):
`hostaffinity bus subscriber add` gives one an identity that reads only its event types through
its own durable consumer, and refuses it everything else (the permission-probe style of
test_bus_permissions.py: each refusal is the server's `Permissions Violation`); add and remove
reload the servers, which keep running (same pids) and keep their clients. In Kubernetes the
same through the Secrets, with the kubelet and the pods' reloader emulated.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import shutil
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest

from hostaffinity.cli.bus_credentials import new_user_seed, public_key
from hostaffinity.cli.bus_subscribers import SUBSCRIBERS_CONF, LocalSubscribers, Subscriber
from hostaffinity.cli.kubernetes_subscribers import SEED_KEY, SUBSCRIBERS_SECRET, seed_secret_name
from hostaffinity.cli.subscriber_admission import wait_until_every_server
from hostaffinity.cli.subscriber_commands import reload_servers
from hostaffinity.runtime.bus.layout import TOPOLOGY_STREAM
from hostaffinity.schema import DLQ_STREAM, EVENTS_STREAM, event_subject
from tests.platform.bus_probe import (
    LEADER_SECONDS,
    REPLY_SECONDS,
    Session,
    first_fetch,
    session,
)
from tests.platform.console import exit_code
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import NatsCluster

NAMESPACE = "hostaffinity"
RELOADED_SECONDS = 10.0


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
    """Store each event. No responder: the just-provisioned R3 stream's leader, or its interest
    after the servers' reload, has not reached this server yet (seen once under load, 0.3 s
    after a reload); asked again for up to LEADER_SECONDS, as the services' outbox does."""
    async with cluster.connection(identity) as bus, asyncio.timeout(LEADER_SECONDS):
        for event_type in event_types:
            while True:
                try:
                    payload = b'{"type": "%s"}' % event_type.encode()
                    await bus.js.publish(event_subject(event_type), payload)
                    break
                except nats.js.errors.NoStreamResponseError:
                    await asyncio.sleep(0.2)


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
        messages = await first_fetch(pull, 10)
        assert [m.subject for m in messages] == [
            event_subject("vm.moved"),
            event_subject("pod.evicted"),
        ]
        for message in messages:
            await message.ack_sync(timeout=REPLY_SECONDS)  # the server confirms each ack
        # The ack subject with domain and account hash, which later servers send (ADR-15).
        later_form = f"$JS.ACK._.HASH.{EVENTS_STREAM}.audit.1.1.1.1.0"
        await audit.nc.publish(later_form, b"+ACK")
        await audit.nc.flush()
        with pytest.raises(TimeoutError):
            await audit.refused(later_form)
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
        f"{api}.CONSUMER.MSG.NEXT.{EVENTS_STREAM}.someone-else",
        f"$JS.ACK.{EVENTS_STREAM}.someone-else.1.1.1.1.0",
        f"$JS.ACK._.HASH.{EVENTS_STREAM}.someone-else.1.1.1.1.0",
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
            [message] = await first_fetch(pull, 1)
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


async def kubelet_and_reloader(cluster: NatsCluster, kube: KubeDouble) -> None:
    """What Kubernetes does for the StatefulSet, emulated: the kubelet writes the Secret's
    subscribers.conf into each pod's mounted volume (one file here, linked into every server's
    folder), and each pod's reloader signals its server when the file changed."""
    loaded = b""
    while True:
        secret = kube.read("v1", "secrets", SUBSCRIBERS_SECRET, NAMESPACE)
        conf = base64.b64decode(secret["data"][SUBSCRIBERS_CONF]) if secret else b""
        if conf and conf != loaded:
            (cluster.credentials_dir / SUBSCRIBERS_CONF).write_bytes(conf)
            reload_servers(cluster.pid_files)
            loaded = conf
        await asyncio.sleep(0.2)


async def refused_once_reloaded(cluster: NatsCluster, seed: Path) -> None:
    """The removed identity's seed is refused once the servers loaded the Secret (a reload
    that, in Kubernetes, follows the command by the kubelet's sync)."""
    deadline = time.monotonic() + RELOADED_SECONDS
    while True:
        try:
            async with session(cluster, "audit", seed):
                pass
        except (nats.errors.Error, OSError):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"a removed subscriber still connects after {RELOADED_SECONDS} s")
        await asyncio.sleep(0.2)


async def test_in_kubernetes_the_secret_reaches_the_servers_and_the_consumer_follows(
    nats_cluster: NatsCluster, kube_double: KubeDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kubernetes = ["--namespace", NAMESPACE, "--kubeconfig", str(kubeconfig)]
    assert await asyncio.to_thread(exit_code, ["bus", "secrets", *kubernetes]) == 0
    through_the_bus = [
        *(option for url in nats_cluster.urls for option in ("--nats", url)),
        "--nats-ca-file", str(nats_cluster.tls_dir / "ca.crt"),
        "--nats-seed", str(nats_cluster.seeds["provision"]),
    ]  # fmt: skip
    pids = _pids(nats_cluster)
    emulation = asyncio.create_task(kubelet_and_reloader(nats_cluster, kube_double))
    try:
        add = ["bus", "subscriber", "add", "audit", "--events", "vm.moved", *kubernetes]
        assert await asyncio.to_thread(exit_code, [*add, *through_the_bus]) == 0
        secret = kube_double.read("v1", "secrets", seed_secret_name("audit"), NAMESPACE)
        assert secret is not None
        seed = tmp_path / "audit.nk"
        seed.write_bytes(base64.b64decode(secret["data"][SEED_KEY]))
        await publish(nats_cluster, "node-labeller", ["vm.moved"])
        async with session(nats_cluster, "audit", seed) as audit:
            pull = await audit.nc.jetstream().pull_subscribe_bind("audit", stream=EVENTS_STREAM)
            [message] = await first_fetch(pull, 1)
            await message.ack_sync(timeout=REPLY_SECONDS)
            assert await audit.publish_refused(f"$JS.API.STREAM.INFO.{EVENTS_STREAM}")

        remove = ["bus", "subscriber", "remove", "audit", *kubernetes]
        assert await asyncio.to_thread(exit_code, [*remove, *through_the_bus]) == 0
        assert kube_double.read("v1", "secrets", seed_secret_name("audit"), NAMESPACE) is None
        await refused_once_reloaded(nats_cluster, seed)
    finally:
        emulation.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await emulation
    assert _pids(nats_cluster) == pids


async def test_the_commands_wait_for_every_server_given_to_load_the_change(
    nats_cluster: NatsCluster,
) -> None:
    """What `add` and `remove` wait for before they return: each server admits (or refuses) the
    subscriber. A server not yet reloaded is named, and waited for until it is."""
    directory = LocalSubscribers(nats_cluster.credentials_dir)
    seed = new_user_seed()
    directory.save([Subscriber("probe", ("vm.moved",), public_key(seed))])
    first, *others = nats_cluster.pid_files
    reload_servers([first])
    ca = str(nats_cluster.tls_dir / "ca.crt")
    second = re.escape(nats_cluster.urls[1])

    def waiting(admitted: bool) -> Coroutine[None, None, None]:
        return wait_until_every_server(
            nats_cluster.urls, "probe", seed, ca, admitted=admitted, wait_seconds=2.0
        )

    with pytest.raises(RuntimeError, match=f"{second} did not admit subscriber probe"):
        await waiting(admitted=True)
    reload_servers(others)
    await waiting(admitted=True)

    directory.save([])
    reload_servers([first])
    with pytest.raises(RuntimeError, match=f"{second} did not refuse subscriber probe"):
        await waiting(admitted=False)
    reload_servers(others)
    await waiting(admitted=False)
