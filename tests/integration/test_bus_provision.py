"""`hostaffinity bus provision` on the shipped cluster, as the Job runs it: a service started
before it waits and says what is missing, the command makes the R3 layout as identity
`provision`, and the service goes on; the CLI reads as identity `cli`."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import nats.js.errors
import pytest
import yaml
from nats.js.api import AckPolicy, ConsumerConfig

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.layout import DRS_STREAM, MAX_CONSUMERS, TOPOLOGY_STREAM
from hostaffinity.schema import DRS_BUCKET, EVENTS_STREAM, TOPOLOGY_BUCKET
from tests.platform.bus_probe import store
from tests.platform.nats import NatsServer
from tests.platform.nats_cluster import NatsCluster

CLI = Path(sys.executable).parent / "hostaffinity"
# JetStream's "maximum consumers limit reached" (nats-server server/errors.json).
MAX_CONSUMERS_REACHED = 10026


@pytest.fixture
async def unprovisioned(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    cluster = NatsCluster(tmp_path / "bus")
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


def provision_config(cluster: NatsCluster, path: Path) -> Path:
    """What the Job mounts (shared.yaml's nats section) with the provision identity."""
    settings = cluster.settings("provision")
    nats = {
        "servers": settings.servers,
        "identity": "provision",
        "nkey_seed_file": settings.nkey_seed_file,
        "tls_ca_file": settings.tls_ca_file,
        "stream_replicas": 3,
        "kv_replicas": 3,
    }
    path.write_text(yaml.safe_dump({"nats": nats}))
    return path


async def test_a_service_waits_for_provisioning_which_makes_the_r3_layout(
    unprovisioned: NatsCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hostaffinity.runtime.bus.client")
    service = await Bus.connect(unprovisioned.settings("scheduler-extender"), name="extender")
    try:
        waiting = asyncio.create_task(
            service.wait_for_layout([TOPOLOGY_STREAM, EVENTS_STREAM], retry_seconds=0.2)
        )
        await asyncio.sleep(0.5)
        assert not waiting.done()
        assert "the bus is not provisioned" in caplog.text
        assert f"stream {TOPOLOGY_STREAM}" in caplog.text
        assert "hostaffinity bus provision" in caplog.text

        config = provision_config(unprovisioned, tmp_path / "shared.yaml")
        done = await asyncio.create_subprocess_exec(
            str(CLI), "bus", "provision", "--config", str(config), "--connect-timeout", "20",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(done.communicate(), 60)
        assert done.returncode == 0, err.decode()
        printed = out.decode()
        assert f"stream {EVENTS_STREAM}: replicas 3" in printed
        assert f"stream {TOPOLOGY_STREAM}: replicas 3" in printed
        # The three buckets (topology, DRS records, placement summary) and both streams.
        assert printed.count("roll-ups refused") == 5
        assert "fleet:" not in printed  # not in a fleet: no mirror
        await asyncio.wait_for(waiting, 10)
    finally:
        await service.close()


async def test_the_cli_reads_the_bus_as_its_read_only_identity(nats_cluster: NatsCluster) -> None:
    settings = nats_cluster.settings("cli")
    follow = await asyncio.create_subprocess_exec(
        str(CLI), "events", "--all", "--nats", settings.servers[0],
        "--nats-seed", str(settings.nkey_seed_file), "--nats-ca-file", str(settings.tls_ca_file),
        "--connect-timeout", "10",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with nats_cluster.connection("node-labeller") as labeller:
            await store(labeller.nc, "hostaffinity.events.vm.moved", b"{}")
        assert follow.stderr is not None
        line = await asyncio.wait_for(follow.stderr.readline(), 15)
        assert b"undecodable message on hostaffinity.events.vm.moved" in line
    finally:
        follow.terminate()
        await follow.wait()


async def test_provisioning_turns_off_roll_ups_of_buckets_an_earlier_release_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Earlier releases made both buckets as nats-py does, roll-ups allowed. A service of this
    release says so and waits; `bus provision` updates the streams in place (keys and history
    kept) and from then on a roll-up is refused."""
    caplog.set_level(logging.WARNING, logger="hostaffinity.runtime.bus.client")
    server = NatsServer(tmp_path)
    await server.start()
    try:
        async with server.connection("earlier-release") as earlier:
            for bucket, history in ((TOPOLOGY_BUCKET, 5), (DRS_BUCKET, 1)):
                store = await earlier.js.create_key_value(bucket=bucket, history=history)
                await store.put("node.worker-1", b"{}")
                await store.put("node.worker-2", b"{}")
        async with server.connection("scheduler-extender") as service:
            waiting = asyncio.create_task(
                service.wait_for_layout([TOPOLOGY_STREAM, DRS_STREAM], retry_seconds=0.1)
            )
            await asyncio.sleep(0.5)
            assert not waiting.done()
            assert f"bucket stream {TOPOLOGY_STREAM} allows roll-ups" in caplog.text
            assert f"bucket stream {DRS_STREAM} allows roll-ups" in caplog.text
            assert "run `hostaffinity bus provision`" in caplog.text

            await server.provision()
            await asyncio.wait_for(waiting, 5)
            for bucket, stream in ((TOPOLOGY_BUCKET, TOPOLOGY_STREAM), (DRS_BUCKET, DRS_STREAM)):
                info = await service.js.stream_info(stream)
                assert info.config.allow_rollup_hdrs is False, stream
                assert info.config.max_consumers == MAX_CONSUMERS[stream], stream
                assert info.state.messages == 2, stream
                store = await service.js.key_value(bucket)
                await store.delete("node.worker-2")  # what the services do: still allowed
                with pytest.raises(nats.js.errors.ServerError, match="rollup not permitted"):
                    await store.purge("node.worker-1")
                assert (await store.get("node.worker-1")).value == b"{}"
    finally:
        await server.stop()


async def test_each_stream_caps_its_consumers(nats_server: NatsServer) -> None:
    """A reader may create ephemeral consumers; past the stream's cap the server refuses
    (JetStream error 10026), so a runaway reader cannot fill the servers' memory."""
    async with nats_server.connection("reader") as reader:
        for stream, cap in MAX_CONSUMERS.items():
            assert (await reader.js.stream_info(stream)).config.max_consumers == cap, stream
        cap = MAX_CONSUMERS[DRS_STREAM]
        for _ in range(cap):
            await reader.js.add_consumer(DRS_STREAM, ConsumerConfig(ack_policy=AckPolicy.NONE))
        with pytest.raises(nats.js.errors.BadRequestError) as refused:
            await reader.js.add_consumer(DRS_STREAM, ConsumerConfig(ack_policy=AckPolicy.NONE))
        assert refused.value.err_code == MAX_CONSUMERS_REACHED
