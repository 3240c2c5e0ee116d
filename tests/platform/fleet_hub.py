"""The fleet hub as it ships, on loopback: three nats-servers from k8s/components/fleet-hub's
hub.conf (TLS on clients, routes and leaf nodes, domain hostaffinity-hub), its authorization
(installs.conf) and TLS from the folder `hostaffinity fleet hub-credentials` makes, provisioned
by `hostaffinity fleet provision`; and installs whose buses (the shipped three-server bus,
tests/platform/nats_cluster.py) join it as leaf nodes with what `hostaffinity fleet join` wrote
for them. The one way the tests make a hub with leaves.

Rendering changes only what a pod's environment makes different here, each change asserted:
ports (client, route, monitor, leaf), the route URLs, the TLS paths, the pid file and the store.
An install joined `cuttable` dials the hub through proxies (`FleetHub.links`) a test can cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
from nats.js.errors import NotFoundError

from hostaffinity.cli.fleet_registry import HUB_AUTHORIZATION, HubFolder
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.fleet_layout import DEFAULT_LEASE_MAX_AGE_SECONDS, FLEET_STREAM
from hostaffinity.runtime.bus.hub_leases import HubLeases
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import (
    FLEET_BUCKET,
    FLEET_LEASES_BUCKET,
    HUB_DOMAIN,
    FleetRuleLease,
    install_token,
)
from tests.platform.console import exit_code
from tests.platform.nats import free_listen_port
from tests.platform.nats_cluster import (
    CLUSTER_SIZE,
    NatsCluster,
    Ports,
    ServerProcess,
    connected,
    on_loopback,
    rewrite,
)
from tests.platform.tcp_proxy import TcpProxy

HUB_CONF: Final = Path(__file__).resolve().parents[2] / "k8s" / "components" / "fleet-hub"


@dataclass(frozen=True)
class HubPorts(Ports):
    leaf: int

    @classmethod
    def free(cls) -> HubPorts:
        return cls(free_listen_port(), free_listen_port(), free_listen_port(), free_listen_port())


def render_hub_conf(index: int, ports: list[HubPorts], tls_dir: Path, store: Path) -> str:
    text = (HUB_CONF / "hub.conf").read_text(encoding="utf-8")
    text = rewrite(text, "listen: 0.0.0.0:7422", f"listen: 127.0.0.1:{ports[index].leaf}")
    return on_loopback(text, "fleet-hub", index, ports, tls_dir, store, tls_files=8)


class LeafLink:
    """An install's way to the hub through one proxy per hub server: `cut` refuses and resets
    every connection (the link down), `restore` accepts them again on the same ports."""

    def __init__(self, ports: list[HubPorts]) -> None:
        self.proxies = [TcpProxy("127.0.0.1", hub.leaf) for hub in ports]
        for proxy in self.proxies:
            proxy.port = free_listen_port()
        self.started = False

    @property
    def urls(self) -> list[str]:
        return [f"tls://127.0.0.1:{proxy.port}" for proxy in self.proxies]

    async def start(self) -> None:
        for proxy in self.proxies:
            await proxy.start()
        self.started = True

    async def cut(self) -> None:
        for proxy in self.proxies:
            await proxy.refuse()

    async def restore(self) -> None:
        for proxy in self.proxies:
            await proxy.accept()

    async def stop(self) -> None:
        for proxy in self.proxies:
            await proxy.stop()


class FleetHub:
    """Three hub servers; installs join through `join`, which is `hostaffinity fleet join`."""

    def __init__(self, workdir: Path, *, history: int = 64, folder: Path | None = None) -> None:
        """`folder`: the hub's folder (`hostaffinity fleet hub-credentials --dir`), made here
        unless given."""
        self.workdir = workdir
        self.history = history
        self.folder = HubFolder(folder or workdir / "hub-folder")
        self.folder.ensure_credentials()
        self.ports = [HubPorts.free() for _ in range(CLUSTER_SIZE)]
        self.links: dict[str, LeafLink] = {}
        self.servers: list[ServerProcess] = []
        for index in range(CLUSTER_SIZE):
            folder = workdir / f"fleet-hub-{index}"
            folder.mkdir(parents=True)
            store = folder / "jetstream"
            config = folder / "hub.conf"
            config.write_text(render_hub_conf(index, self.ports, self.folder.tls_dir, store))
            (folder / HUB_AUTHORIZATION).symlink_to(self.folder.directory / HUB_AUTHORIZATION)
            env = {"POD_NAME": f"fleet-hub-{index}"}
            self.servers.append(
                ServerProcess(f"fleet-hub-{index}", config, env, self.ports[index].monitor)
            )

    @property
    def urls(self) -> list[str]:
        return [f"tls://127.0.0.1:{ports.client}" for ports in self.ports]

    @property
    def tls_dir(self) -> Path:
        return self.folder.tls_dir

    @property
    def seeds(self) -> dict[str, Path]:
        return {who: self.folder.seed_file(who) for who in ("fleet-provision", "fleet-cli")}

    @property
    def leaf_urls(self) -> list[str]:
        return [f"tls://127.0.0.1:{ports.leaf}" for ports in self.ports]

    def settings(self, identity: str) -> NatsSettings:
        return NatsSettings(
            servers=self.urls,
            identity=identity,
            nkey_seed_file=str(self.folder.seed_file(identity)),
            tls_ca_file=str(self.folder.tls_dir / "ca.crt"),
            stream_replicas=CLUSTER_SIZE,
            kv_replicas=CLUSTER_SIZE,
        )

    def connection(
        self, identity: str = "fleet-cli"
    ) -> contextlib.AbstractAsyncContextManager[Bus]:
        return connected(self.settings(identity))

    async def start(self) -> None:
        """The three servers (and the proxies of cuttable links, the first time)."""
        for link in self.links.values():
            if not link.started:
                await link.start()
        for server in self.servers:
            await server.start(wait=False)
        for server in self.servers:
            await server.wait_healthy()
        for server in self.servers:
            await server.wait_healthy("")

    async def stop(self) -> None:
        await asyncio.gather(*(server.stop() for server in self.servers))

    async def close(self) -> None:
        """The servers and every cuttable link's proxies."""
        await self.stop()
        for link in self.links.values():
            await link.stop()

    def reload(self) -> None:
        """SIGHUP every running server: installs.conf changed (the Kubernetes reloader's job)."""
        for server in self.servers:
            pid_file = server.config.parent / "nats.pid"
            if server.running and pid_file.exists():
                os.kill(int(pid_file.read_text().strip()), signal.SIGHUP)

    async def provision(
        self, *, lease_max_age_seconds: float = DEFAULT_LEASE_MAX_AGE_SECONDS
    ) -> None:
        """`hostaffinity fleet provision` as its operator runs it: the view, sourcing every
        registered install, and the fleet rule leases bucket with its max age."""
        argv = ["fleet", "provision", "--dir", str(self.folder.directory)]
        for url in self.urls:
            argv += ["--nats", url]
        argv += ["--history", str(self.history), "--lease-max-age", str(lease_max_age_seconds)]
        code = await asyncio.to_thread(exit_code, argv)
        assert code == 0, f"hostaffinity {' '.join(argv)} exited {code}"

    def join(
        self, name: str, cluster: str, workdir: Path, *, cuttable: bool = False
    ) -> NatsCluster:
        """Register the install and make its bus (not started) with what the join wrote;
        `cuttable`: it dials the hub through `links[name]`, started with the hub."""
        urls = self.leaf_urls
        if cuttable:
            link = self.links[name] = LeafLink(self.ports)
            urls = link.urls
        self.folder.join(name, cluster, urls, ca_path="HUB_CA_PATH")
        install_folder = self.folder.install_dir(name)
        leaf = install_folder / "fleet.conf"
        ca = install_folder / "hub-ca.crt"
        leaf.write_text(rewrite(leaf.read_text(), "HUB_CA_PATH", str(ca)))
        return NatsCluster(workdir, fleet=install_folder, fleet_install=install_token(cluster))


# -- what a test reads of the fleet: the view, and what the hub sourced ----------------------


async def view(bus: Bus) -> dict[str, bytes]:
    """Every live key of the fleet view on this bus (the hub's, or an install's mirror)."""
    return await live_entries(await bus.js.key_value(FLEET_BUCKET))


async def held(bus: Bus, stream: str) -> list[int]:
    """The sequences `stream` still holds (a bucket keeps the latest revision of each key)."""
    info = await bus.js.stream_info(stream)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        with contextlib.suppress(NotFoundError):
            await bus.js.get_msg(stream, seq)
            found.append(seq)
    return found


def once_each(sourced: list[int], origin: list[int]) -> None:
    """Nothing twice (no origin sequence repeats, and they came in order) and nothing lost
    (every revision the origin still holds is on the hub)."""
    assert sourced == sorted(set(sourced)), f"a revision sourced twice or out of order: {sourced}"
    assert set(origin) <= set(sourced), f"lost: {sorted(set(origin) - set(sourced))}"


async def sourced(hub: Bus, token: str, stream: str) -> list[int]:
    """The origin sequence of every message the hub's view holds from `stream` of install
    `token`, in the order the hub stored them (the Nats-Stream-Source header: source, origin
    sequence, ...)."""
    info = await hub.js.stream_info(FLEET_STREAM)
    prefix = f"$KV.{FLEET_BUCKET}.{token}."
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        with contextlib.suppress(NotFoundError):
            msg = await hub.js.get_msg(FLEET_STREAM, seq)
            header = (msg.headers or {}).get("Nats-Stream-Source", "")
            if msg.subject.startswith(prefix) and header.split(" ")[0].startswith(stream):
                found.append(int(header.split(" ")[1]))
    return found


async def lease_holder(install: NatsCluster, key: str) -> str | None:
    """The cluster identity holding the fleet rule lease `key` on the hub, as the install's
    drs-translator reads it (through its own bus and the hub's domain); None: free."""
    async with install.connection("drs-translator") as bus:
        held = await HubLeases(bus.nc, HUB_DOMAIN, FLEET_LEASES_BUCKET).read(key)
    if held.value is None:
        return None
    return msgspec.json.decode(held.value, type=FleetRuleLease).holder


@contextlib.asynccontextmanager
async def running_hub(
    workdir: Path, *, history: int = 64, folder: Path | None = None
) -> AsyncIterator[FleetHub]:
    hub = FleetHub(workdir, history=history, folder=folder)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.close()
