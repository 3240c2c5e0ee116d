"""`hostaffinity bus provision` on the shipped cluster, as the Job runs it: a service started
before it waits and says what is missing, the command makes the R3 layout as identity
`provision`, and the service goes on; the CLI reads as identity `cli`."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from hostaffinity.runtime.bus import Bus
from hostaffinity.runtime.layout import TOPOLOGY_STREAM
from hostaffinity.schema import EVENTS_STREAM
from tests.platform.nats_cluster import NatsCluster

CLI = Path(sys.executable).parent / "hostaffinity"


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
    caplog.set_level(logging.WARNING, logger="hostaffinity.runtime.bus")
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
            await labeller.nc.request("hostaffinity.events.vm.moved", b"{}", timeout=5)
        assert follow.stderr is not None
        line = await asyncio.wait_for(follow.stderr.readline(), 15)
        assert b"undecodable message on hostaffinity.events.vm.moved" in line
    finally:
        follow.terminate()
        await follow.wait()
