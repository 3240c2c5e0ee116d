"""The fleet at estate scale: 20 clusters of 500 nodes (10,000 node VMs on 1,000 ESXi hosts) on
one hub, and what one more cluster costs.

    uv run --frozen python bench/fleet_estate_bench.py [--clusters 20] [--nodes 500] [--hosts 1000]

The hub as shipped (three servers from k8s/components/fleet-hub/hub.conf, TLS, R3; see
tests/platform/fleet_hub.py);
each install's bus a single nats-server (R1, its own JetStream domain) joined as a leaf node
with what `hostaffinity fleet join` wrote. Each install writes its topology (one key per node)
and its placement summary (workloads of 10 replicas, 30 pods per node, as the descheduler
would), the hub sources them all, every install mirrors the view back. Prints: how long the
hub took to hold everything; the hub servers' CPU seconds and RSS (read from /proc); how long
`fleet exposure` takes on one install (read its mirror, decode, analyse); then the same for one
more cluster joined to the running fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)
import msgspec

from hostaffinity.affinity.fleet import collector_paused, exposure, read_view
from hostaffinity.cli.fleet_commands import WORKLOAD_KEYS
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import (
    FLEET_BUCKET,
    PLACEMENTS_BUCKET,
    TOPOLOGY_BUCKET,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_host_id,
    install_domain,
    node_key,
    workload_key,
)
from tests.platform.fleet_hub import FleetHub
from tests.platform.nats import free_listen_port
from tests.platform.nats_cluster import ServerProcess, rewrite

VCENTER_UUID = "5c2d1b8e-0a4f-4e39-9b7d-6f1e2a3b4c5d"
PODS_PER_NODE = 30
REPLICAS = 10


class InstallBus:
    """One install's bus: a nats-server in its own domain, joined to the hub as a leaf."""

    def __init__(self, hub: FleetHub, name: str, workdir: Path) -> None:
        self.name = name
        hub.folder.join(name, name, hub.leaf_urls, ca_path="HUB_CA_PATH")
        folder = hub.folder.install_dir(name)
        leaf = (folder / "fleet.conf").read_text()
        self.port, monitor = free_listen_port(), free_listen_port()
        home = workdir / name
        home.mkdir()
        (home / "fleet.conf").write_text(rewrite(leaf, "HUB_CA_PATH", str(folder / "hub-ca.crt")))
        config = home / "install.conf"
        config.write_text(
            f"listen: 127.0.0.1:{self.port}\nhttp: 127.0.0.1:{monitor}\n"
            f"jetstream {{\n  store_dir: {home / 'js'}\n  domain: {install_domain(name)}\n}}\n"
            "include fleet.conf\n"
        )
        self.server = ServerProcess(name, config, {}, monitor)

    def settings(self) -> NatsSettings:
        return NatsSettings(servers=[f"nats://127.0.0.1:{self.port}"], fleet_install=self.name)

    @contextlib.asynccontextmanager
    async def bus(self) -> AsyncIterator[Bus]:
        connected = await Bus.connect(self.settings(), name=f"bench-{self.name}")
        try:
            yield connected
        finally:
            await connected.close()


def node_value(node: str, host: str) -> bytes:
    return msgspec.json.encode(
        NodePlacement(
            node=node, vm_moid=f"vm-{node}", bios_uuid="", instance_uuid="", host_moid=host,
            host_name=f"{host}.example", host_label=host, cluster_moid="domain-c1",
            cluster_name="c1", datacenter="dc", vcenter="vc", observed_at="", version=1,
            vcenter_uuid=VCENTER_UUID,
        )
    )  # fmt: skip


async def populate(install: InstallBus, nodes: int, hosts: int, rng: random.Random) -> int:
    """Its nodes on random hosts, its workloads' replicas on random nodes; keys written."""
    placed = {
        f"{install.name}-node-{i:04d}": f"esx-{rng.randrange(hosts):04d}" for i in range(nodes)
    }
    names = sorted(placed)
    written = 0
    async with install.bus() as bus:
        await bus.provision()
        topology = await bus.js.key_value(TOPOLOGY_BUCKET)
        summaries = await bus.js.key_value(PLACEMENTS_BUCKET)
        puts = [
            topology.put(node_key(node), node_value(node, host)) for node, host in placed.items()
        ]
        for w in range(nodes * PODS_PER_NODE // REPLICAS):
            chosen = rng.sample(names, REPLICAS)
            replicas = [
                ReplicaPlacement(
                    pod=f"app-{w}-{r}", node=node, host_name=f"{placed[node]}.example",
                    host_id=fleet_host_id(VCENTER_UUID, placed[node], placed[node]),
                )
                for r, node in enumerate(chosen)
            ]  # fmt: skip
            value = WorkloadPlacement(
                cluster=install.name, namespace=f"ns-{w % 50}", kind="Deployment",
                name=f"app-{w}", fleet_group=f"group-{w % 200}" if w % 10 == 0 else "",
                replicas=replicas,
            )  # fmt: skip
            key = workload_key(value.namespace, value.kind, value.name)
            puts.append(summaries.put(key, msgspec.json.encode(value)))
        for start in range(0, len(puts), 500):
            await asyncio.gather(*puts[start : start + 500])
        written = len(puts)
    return written


def hub_usage(hub: FleetHub) -> tuple[float, float]:
    """The hub servers' CPU seconds so far and RSS now, summed (from /proc)."""
    cpu = rss = 0.0
    for server in hub.servers:
        pid = int((server.config.parent / "nats.pid").read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(stat[11]) + int(stat[12])
        cpu += ticks / 100
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) / 1024
    return cpu, rss


async def hub_messages(hub: FleetHub) -> int:
    return (await hub_view_size(hub))[0]


async def hub_view_size(hub: FleetHub) -> tuple[int, int]:
    """The hub's fleet view: messages and bytes (on each of its three servers)."""
    async with hub.connection() as bus:
        state = (await bus.js.stream_info(FLEET_STREAM)).state
        return int(state.messages), int(state.bytes)


async def converge(hub: FleetHub, wanted: int) -> float:
    started = time.perf_counter()
    while await hub_messages(hub) < wanted:  # noqa: ASYNC110 - polling the hub is the point
        await asyncio.sleep(0.5)
    return time.perf_counter() - started


async def mirrored(installs: list[InstallBus], wanted: int) -> float:
    """Until every install's mirror holds the whole view; how long that took."""
    started = time.perf_counter()
    for install in installs:
        async with install.bus() as bus:
            while (await bus.js.stream_info(FLEET_STREAM)).state.messages < wanted:  # noqa: ASYNC110
                await asyncio.sleep(0.5)
    return time.perf_counter() - started


async def time_exposure(install: InstallBus, runs: int = 5) -> tuple[list[Parts], int, int]:
    """`fleet exposure`'s work on one install, `runs` times, as read_fleet does it: read the
    workloads' keys of its mirror (the collector paused), decode, then analyse."""
    samples = []
    async with install.bus() as bus:
        kv = await bus.js.key_value(FLEET_BUCKET)
        for _ in range(runs):
            started = time.perf_counter()
            with collector_paused():
                entries = await live_entries(kv, WORKLOAD_KEYS)
            read = time.perf_counter()
            view = read_view(entries)
            decoded = time.perf_counter()
            found = exposure(view)
            done = time.perf_counter()
            samples.append(Parts(read - started, decoded - read, done - decoded))
    return samples, len(found), sum(len(w) for w in view.workloads.values())


@dataclass(frozen=True)
class Parts:
    read: float
    decode: float
    analyse: float

    @property
    def total(self) -> float:
        return self.read + self.decode + self.analyse


def describe(samples: list[Parts]) -> str:
    def median(part: str) -> float:
        return statistics.median(getattr(sample, part) for sample in samples)

    return (
        f"median {median('total'):.2f} s (read {median('read'):.2f}, decode "
        f"{median('decode'):.2f}, analyse {median('analyse'):.2f}), max "
        f"{max(sample.total for sample in samples):.2f} s"
    )


async def run(clusters: int, nodes: int, hosts: int) -> None:
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        hub = FleetHub(workdir / "hub", history=1)
        installs = [InstallBus(hub, f"c{i:02d}", workdir) for i in range(clusters)]
        await hub.start()
        try:
            for install in installs:
                await install.server.start()
            await hub.provision()
            idle_cpu, idle_rss = hub_usage(hub)
            started = time.perf_counter()
            written = 0
            for install in installs:
                written += await populate(install, nodes, hosts, rng)
            write_s = time.perf_counter() - started
            waited = await converge(hub, written)
            cpu, rss = hub_usage(hub)
            print(
                f"estate: {clusters} clusters x {nodes} nodes on {hosts} hosts: {written} keys "
                f"({clusters * nodes} node VMs, {written - clusters * nodes} workload summaries)"
            )
            print(
                f"hub: all sourced {waited:.1f} s after the last write ({write_s:.1f} s of "
                f"writes); CPU {cpu - idle_cpu:.1f} s over three servers, RSS {rss:.0f} MiB "
                f"(idle {idle_rss:.0f} MiB)"
            )
            _, stored = await hub_view_size(hub)
            print(f"hub's fleet view: {stored / 2**20:.0f} MiB on each server")
            waited = await mirrored(installs, written)
            print(f"every install's mirror whole {waited:.1f} s later")
            took, exposed, workloads = await time_exposure(installs[0])
            print(
                f"fleet exposure on one install's mirror, {len(took)} runs: {describe(took)} "
                f"for {workloads} workloads ({exposed} exposures)"
            )
            extra = InstallBus(hub, f"c{clusters:02d}", workdir)
            installs.append(extra)
            hub.reload()
            await extra.server.start()
            await hub.provision()
            before_cpu, before_rss = hub_usage(hub)
            await asyncio.sleep(2)  # the hub's reload, the leaf link
            added = await populate(extra, nodes, hosts, rng)
            waited = await converge(hub, written + added)
            cpu, rss = hub_usage(hub)
            await mirrored(installs, written + added)
            took, _, workloads = await time_exposure(extra)
            print(
                f"one more cluster: +{added} keys sourced in {waited:.1f} s, hub CPU "
                f"+{cpu - before_cpu:.1f} s, RSS {rss - before_rss:+.0f} MiB (Go's collector "
                f"makes this one noisy); fleet exposure then {describe(took)} for {workloads} "
                "workloads"
            )
        finally:
            for install in installs:
                await install.server.stop()
            await hub.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--hosts", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(run(args.clusters, args.nodes, args.hosts))


if __name__ == "__main__":
    main()
