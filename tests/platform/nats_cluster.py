"""The bus as it ships: nats-servers started from k8s/base/nats (cluster.conf or local.conf,
with auth.conf and subscribers.conf beside it), every client one of its identities.

`NatsCluster` is the Kubernetes StatefulSet on loopback: three servers from cluster.conf, TLS on
clients and routes, R3. Rendering changes only what a pod's environment makes different here,
each change asserted to match: ports (client, route, monitor), the route URLs, the paths of the
TLS files, the pid file and the store. The nkeys come from `hostaffinity bus credentials`, the
TLS material is the Secret `hostaffinity bus secrets` makes (its names include 127.0.0.1, as a
port-forward needs).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import urllib.request
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from hostaffinity.cli.bus_credentials import SERVER_ENV_FILE, tls_secret, write_local_credentials
from hostaffinity.cli.bus_subscribers import SUBSCRIBERS_CONF
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from tests.kinds import refuse_in_fast_tests
from tests.platform.nats import free_listen_port, nats_server_binary, stop_process

SHIPPED: Final = Path(__file__).resolve().parents[2] / "k8s" / "base" / "nats"
CLUSTER_SIZE: Final = 3
STARTUP_TIMEOUT_SECONDS: Final = 20.0
STOP_TIMEOUT_SECONDS: Final = 15.0
SYNC_ALWAYS: Final = "  sync_interval: always\n"
NAMESPACE: Final = "hostaffinity"


def shipped(name: str) -> str:
    return (SHIPPED / name).read_text(encoding="utf-8")


def client_limit(key: str) -> int:
    """A limit cluster.conf sets on every client (`max_connections`, `max_subscriptions`)."""
    found = re.search(rf"^{key}:\s*(\d+)$", shipped("cluster.conf"), re.MULTILINE)
    if found is None:
        raise AssertionError(f"cluster.conf sets no {key}")
    return int(found[1])


def connections(server: ServerProcess) -> list[dict[str, Any]]:
    """The server's client connections with their subscription counts (/connz on its loopback
    monitor, where only this machine reads it)."""
    url = f"http://127.0.0.1:{server.monitor_port}/connz?limit=1024"
    with urllib.request.urlopen(url, timeout=2) as response:
        found: list[dict[str, Any]] = json.load(response)["connections"]
    return found


def rewrite(text: str, old: str, new: str, count: int = 1) -> str:
    """Replace `old` exactly `count` times; a shipped file that changed shape fails here."""
    found = text.count(old)
    if found != count:
        raise AssertionError(f"expected {count} of {old!r} in the shipped config, found {found}")
    return text.replace(old, new)


@dataclass(frozen=True)
class Ports:
    client: int
    route: int
    monitor: int

    @classmethod
    def free(cls) -> Ports:
        """Chosen outside the ephemeral range: a server binds them a while later, and again on
        a restart, when an outgoing connection's local end may have taken a probed port."""
        return cls(free_listen_port(), free_listen_port(), free_listen_port())


def default_sync(text: str) -> str:
    """A shipped config without its `sync_interval: always`, so nats-server's default applies
    (fsync every 2 minutes): the variant bench/bus_bench.py compares the shipped one with."""
    return rewrite(text, SYNC_ALWAYS, "")


def render_cluster_conf(
    index: int, ports: list[Ports], tls_dir: Path, store: Path, *, sync_always: bool = True
) -> str:
    """cluster.conf for server `index` of the loopback cluster; `sync_always=False` renders the
    default-sync variant."""
    text = shipped("cluster.conf")
    if not sync_always:
        text = default_sync(text)
    return on_loopback(text, "nats", index, ports, tls_dir, store, tls_files=6)


def on_loopback(
    text: str,
    statefulset: str,
    index: int,
    ports: Sequence[Ports],
    tls_dir: Path,
    store: Path,
    *,
    tls_files: int,
) -> str:
    """A shipped server config of the StatefulSet `statefulset` (pods `<name>-<i>` behind
    `<name>-headless`) for server `index` here: its ports, its peers' routes, the TLS files,
    pid file and store (the bus's cluster.conf, the fleet hub's hub.conf)."""
    own = ports[index]
    text = rewrite(text, "listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{own.client}")
    text = rewrite(text, "http: 127.0.0.1:8222", f"http: 127.0.0.1:{own.monitor}")
    text = rewrite(text, "listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{own.route}")
    for peer, peer_ports in enumerate(ports):
        text = rewrite(
            text,
            f"nats-route://{statefulset}-{peer}.{statefulset}-headless:6222",
            f"nats-route://127.0.0.1:{peer_ports.route}",
        )
    text = rewrite(text, "/etc/nats/tls/", f"{tls_dir}/", count=tls_files)
    text = rewrite(text, "/var/run/nats/nats.pid", str(store.parent / "nats.pid"))
    return rewrite(text, "store_dir: /data/jetstream", f"store_dir: {store}")


class ServerProcess:
    """One nats-server: start, wait until JetStream is healthy, stop gently or kill -9."""

    def __init__(
        self,
        name: str,
        config: Path,
        env: dict[str, str],
        monitor_port: int,
        options: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.config = config
        self.env = env
        self.monitor_port = monitor_port
        # Command-line options after the config (which they override), as scripts/dev.sh gives.
        self.options = tuple(options)
        self.log_file = config.parent / "nats-server.log"
        self._process: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def pid(self) -> int | None:
        """The running server's process id (what the campaign's soak samples), else None."""
        return self._process.pid if self.running and self._process is not None else None

    async def start(self, *, wait: bool = True) -> None:
        refuse_in_fast_tests("a nats-server")
        self._process = await asyncio.create_subprocess_exec(
            str(nats_server_binary()),
            f"--config={self.config}",
            f"--log={self.log_file}",
            *self.options,
            env={**os.environ, **self.env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        if wait:
            await self.wait_healthy()

    async def wait_healthy(self, query: str = "js-server-only=true") -> None:
        """Until /healthz?<query> answers 200 (the probes Kubernetes uses)."""
        url = f"http://127.0.0.1:{self.monitor_port}/healthz?{query}"
        async with asyncio.timeout(STARTUP_TIMEOUT_SECONDS):
            while True:
                if self._process is not None and self._process.returncode is not None:
                    raise RuntimeError(f"{self.name} exited; see {self.log_file}")
                if await asyncio.to_thread(_answers_ok, url):
                    return
                await asyncio.sleep(0.1)

    async def kill(self) -> None:
        """kill -9: no lame duck, no flush."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGKILL)
            await process.wait()

    async def stop(self) -> None:
        process, self._process = self._process, None
        await stop_process(process)


def leaf_connections(server: ServerProcess) -> int:
    """How many leaf-node connections the server has up (/leafz on its loopback monitor); 0
    while it is not running."""
    if not server.running:
        return 0
    url = f"http://127.0.0.1:{server.monitor_port}/leafz"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(json.load(response).get("leafnodes", 0))
    except OSError:
        return 0


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class NatsCluster:
    """Three servers from the shipped cluster.conf and auth.conf on loopback, TLS on."""

    def __init__(
        self,
        workdir: Path,
        *,
        sync_always: bool = True,
        fleet: Path | None = None,
        fleet_install: str = "",
    ) -> None:
        """`fleet`: the folder `hostaffinity fleet join` wrote for this install (its leaf
        remote and JetStream domain), `fleet_install` its token (provisioning then mirrors the
        fleet view); without them, the shipped placeholders (no fleet)."""
        self.workdir = workdir
        self.fleet_install = fleet_install
        self.ports = [Ports.free() for _ in range(CLUSTER_SIZE)]
        self.tls_dir = workdir / "tls"
        self.credentials_dir = workdir / "credentials"
        self.seeds = write_local_credentials(self.credentials_dir)
        self._write_tls()
        server_env = _read_env(self.credentials_dir / SERVER_ENV_FILE)
        self.servers: list[ServerProcess] = []
        for index in range(CLUSTER_SIZE):
            folder = workdir / f"nats-{index}"
            folder.mkdir()
            config = folder / "cluster.conf"
            store = folder / "jetstream"
            config.write_text(
                render_cluster_conf(index, self.ports, self.tls_dir, store, sync_always=sync_always)
            )
            (folder / "auth.conf").write_text(shipped("auth.conf"))
            for name in ("fleet.conf", "fleet-domain.conf"):
                source = SHIPPED / name if fleet is None else fleet / name
                (folder / name).write_text(source.read_text(encoding="utf-8"))
            # One subscribers.conf for all three, as the Secret mounted into each pod is: the
            # one `hostaffinity bus credentials` (and `bus subscriber`) write.
            (folder / SUBSCRIBERS_CONF).symlink_to(self.credentials_dir / SUBSCRIBERS_CONF)
            env = {**server_env, "POD_NAME": f"nats-{index}"}
            self.servers.append(
                ServerProcess(f"nats-{index}", config, env, self.ports[index].monitor)
            )

    def _write_tls(self) -> None:
        """The files of the Secret `hostaffinity bus secrets` makes, as the pods mount them: the
        certificate the servers present here is the shipped one, names and all."""
        self.tls_dir.mkdir()
        for key, value in tls_secret(NAMESPACE)["data"].items():
            (self.tls_dir / key).write_bytes(base64.b64decode(value))

    @property
    def urls(self) -> list[str]:
        return [f"tls://127.0.0.1:{ports.client}" for ports in self.ports]

    def settings(self, identity: str, *, urls: list[str] | None = None) -> NatsSettings:
        """How a service (or the CLI, or provisioning) of that identity connects: all three
        servers, its nkey seed, the CA, R3 as the shipped shared.yaml says."""
        return NatsSettings(
            servers=urls or self.urls,
            identity=identity,
            nkey_seed_file=str(self.seeds[identity]),
            tls_ca_file=str(self.tls_dir / "ca.crt"),
            stream_replicas=CLUSTER_SIZE,
            kv_replicas=CLUSTER_SIZE,
            fleet_install=self.fleet_install,
        )

    def connection(self, identity: str) -> contextlib.AbstractAsyncContextManager[Bus]:
        return connected(self.settings(identity))

    @property
    def pid_files(self) -> list[Path]:
        """Each server's pid file (cluster.conf's pid_file, beside its config here)."""
        return [server.config.parent / "nats.pid" for server in self.servers]

    def subscriber_command(self, verb: str, *argv: str) -> list[str]:
        """`hostaffinity bus subscriber VERB ...` as this cluster's operator runs it: the
        local credentials folder, each server's pid file, provisioning over TLS."""
        command = ["bus", "subscriber", verb, *argv, "--dir", str(self.credentials_dir)]
        if verb == "list":
            return command
        for pid_file in self.pid_files:
            command += ["--pid-file", str(pid_file)]
        for url in self.urls:
            command += ["--nats", url]
        return [*command, "--nats-ca-file", str(self.tls_dir / "ca.crt")]

    async def start(self) -> None:
        for server in self.servers:
            await server.start(wait=False)
        for server in self.servers:
            await server.wait_healthy()
        # A meta leader is elected once all three see each other.
        for server in self.servers:
            await server.wait_healthy("")

    async def provision(self) -> None:
        async with self.connection("provision") as bus:
            await bus.provision()

    async def stop(self) -> None:
        await asyncio.gather(*(server.stop() for server in self.servers))

    def leaf_connected(self) -> bool:
        """Whether every server's link to the fleet hub is up (each server dials it)."""
        return all(leaf_connections(server) > 0 for server in self.servers)


class LocalBus:
    """The one server of `make dev` and compose: the shipped local.conf and auth.conf, address,
    ports and store given on the command line as scripts/dev.sh gives them, the nkeys of
    `hostaffinity bus credentials --dir <credentials_dir>` (dev's is .cache/dev/nats)."""

    def __init__(self, workdir: Path, credentials_dir: Path) -> None:
        self.ports = Ports.free()
        self.seeds = write_local_credentials(credentials_dir)
        folder = workdir / "nats-local"
        folder.mkdir(parents=True)
        for name in ("local.conf", "auth.conf"):
            (folder / name).write_text(shipped(name))
        # local.conf includes the subscribers `hostaffinity bus credentials` wrote beside the
        # seeds, as make dev's copy does.
        (folder / SUBSCRIBERS_CONF).symlink_to(credentials_dir / SUBSCRIBERS_CONF)
        options = (
            "-a", "127.0.0.1", "-p", str(self.ports.client), "-m", str(self.ports.monitor),
            "-sd", str(folder / "jetstream"),
        )  # fmt: skip
        env = _read_env(credentials_dir / SERVER_ENV_FILE)
        self.server = ServerProcess("nats", folder / "local.conf", env, self.ports.monitor, options)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.ports.client}"

    def settings(self, identity: str) -> NatsSettings:
        return NatsSettings(
            servers=[self.url], identity=identity, nkey_seed_file=str(self.seeds[identity])
        )

    def connection(self, identity: str) -> contextlib.AbstractAsyncContextManager[Bus]:
        return connected(self.settings(identity))

    async def start(self) -> None:
        await self.server.start()
        async with self.connection("provision") as bus:
            await bus.provision()

    async def stop(self) -> None:
        await self.server.stop()


@contextlib.asynccontextmanager
async def connected(settings: NatsSettings) -> AsyncIterator[Bus]:
    """A client of the identity `settings` names, closed after the block."""
    bus = await Bus.connect(settings, name=f"test-{settings.identity}")
    try:
        yield bus
    finally:
        await bus.close()


def _read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {name: value for name, value in pairs}


@contextlib.asynccontextmanager
async def running_cluster(workdir: Path) -> AsyncIterator[NatsCluster]:
    """The shipped 3-server cluster in `workdir`, provisioned (R3), stopped after the block."""
    cluster = NatsCluster(workdir)
    await cluster.start()
    try:
        await cluster.provision()
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def nats_cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    """The shipped 3-server cluster, provisioned (R3), stopped after the test."""
    async with running_cluster(tmp_path / "bus") as cluster:
        yield cluster
