"""A service as its console script runs it: ready through the runner, JSON log lines, and a
SIGTERM that drains and exits 0 (the scheduler-extender against nats-server and the double)."""

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp

from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer, free_port

SCRIPT = Path(sys.executable).parent / "hostaffinity-scheduler-extender"


async def _ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            return response.status == 200
    except aiohttp.ClientConnectionError:
        return False


async def test_sigterm_drains_and_exits_0_with_json_logs(
    nats_server: NatsServer, kube_double: KubeDouble, tmp_path: Path
) -> None:
    health_port = free_port()
    environment = os.environ | {
        "HOSTAFFINITY_NATS__SERVERS": json.dumps([nats_server.url]),
        "HOSTAFFINITY_KUBERNETES__KUBECONFIG": str(
            kube_double.write_kubeconfig(tmp_path / "kubeconfig")
        ),
        "HOSTAFFINITY_HEALTH__HOST": "127.0.0.1",
        "HOSTAFFINITY_HEALTH__PORT": str(health_port),
        "HOSTAFFINITY_EXTENDER__HOST": "127.0.0.1",
        "HOSTAFFINITY_EXTENDER__PORT": str(free_port()),
        "HOSTAFFINITY_LOGGING__FORMAT": "json",
    }
    log = tmp_path / "extender.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(SCRIPT), env=environment, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 60
            while not await _ready(health_port):
                assert process.returncode is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert code == 0, lines
    messages = [line["message"] for line in lines]
    assert any(m.startswith("scheduler-extender listening on port") for m in messages)
    assert "stopping: finishing requests in flight" in messages
    assert all(line["level"] in ("INFO", "WARNING") for line in lines), lines
