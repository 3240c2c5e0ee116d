"""A fleet group violation made by a vMotion, at 20 clusters x 500 nodes: from the topology KV
put that says this cluster's node VM now runs on a host holding another cluster's member of the
group, to this cluster's descheduler's Eviction of its own member committed in the Kubernetes
double.

    uv run --frozen python bench/fleet_group_bench.py [--nodes 500] [--clusters 20]
        [--groups 200] [--workloads 1500] [--samples 100]

The world, one install's share of it: its bus (a real nats-server), the Kubernetes double (in
this process, so each write's commit time is read exactly) with `--nodes` Nodes, one per ESXi host
of `--nodes` hosts, 30 pods per node in workloads of 10 replicas (`--workloads` of them) and one
member of each of `--groups` fleet groups (a ReplicaSet of one, on node i for group i); the topology
bucket as the node-labeller writes it; and the fleet view (`hostaffinity-fleet`) filled directly,
as the hub mirrors it, with the other `--clusters` - 1 clusters' placement summaries: each one's
`--workloads` workloads of 10 replicas (in no group) and one member of every group, on hosts of
their own (no pile at the start). The descheduler runs as its own process from its console
script, with the default policy (every strategy, RemovePodsViolatingFleetGroups included) and the
product's Lease timings.

Each sample takes a fleet group not used before (no cooldown in the way) and another cluster
whose member of it would stay on a shared host (the tie-break: this cluster's member is the one to
move), and puts its member's node's placement on that member's host, as the node-labeller puts it
after a vMotion. Measured: from just before that put to the Eviction of the member committed in the
double; each evicted pod is then removed (its kubelet), and the next sample waits 0.3 s. The figure
covers the topology watch, the debounce (0.1 s), the decision cycle (every strategy, scoped, with
the fleet view of that size in memory) and the executor's Eviction call. It leaves out what comes
before the put (vCenter → node-labeller: reaction_bench.py's "completeTime → label patch" part) and
a vMotion of another cluster's node onto this cluster's member, which reaches this descheduler
through the hub's mirror first (the fleet hub's own figure). Prints p50/p99/max, the descheduler's
cycle times (its log), evictions committed against samples (exactly one each), the descheduler's
peak RSS and the load average. Never fails on timing.
"""

from __future__ import annotations

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from reaction_bench import Commits, cycle_seconds, follow, load, ms, service, until

from hostaffinity.affinity.fleet_groups import stayer
from hostaffinity.runtime.process.config import ClusterSettings, SharedSettings
from hostaffinity.schema import (
    FLEET_BUCKET,
    LABEL_FLEET_GROUP,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_host_id,
    fleet_key,
    workload_key,
)
from tests.e2e.descheduler_harness import descheduler_config, node_object, pod_object
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer

ME = "cluster-00"
NAMESPACE = "bench"
REPLICAS = 10
PODS_PER_NODE = 30
VCENTER, VCENTER_UUID, VSPHERE_CLUSTER = "vcenter", "5014c2b6-bench", "domain-c7"
# Another cluster's member of group g sits on host MEMBER_BASE + (g + c * STRIDE) % span: hosts
# below MEMBER_BASE hold only this cluster's members, so a sample's move piles one group only.
STRIDE = 17


def host(index: int) -> str:
    return f"esx-{index:03d}.lab"


def other(c: int) -> str:
    return f"cluster-{c:02d}"


@dataclass
class World:
    nodes: int
    clusters: int
    groups: int
    workloads: int
    pods: list[dict[str, Any]] = field(default_factory=list)
    view: dict[str, WorkloadPlacement] = field(default_factory=dict)

    @property
    def member_base(self) -> int:
        return self.groups

    def their_host(self, group: int, c: int) -> int:
        span = self.nodes - self.member_base
        return self.member_base + (group + c * STRIDE) % span

    def summarise(self, c: int, name: str, group: str, replicas: list[ReplicaPlacement]) -> None:
        """Cluster `c`'s workload `name` in the fleet view, as the hub mirrors it."""
        key = fleet_key(other(c), workload_key(NAMESPACE, "ReplicaSet", name))
        self.view[key] = WorkloadPlacement(
            cluster=other(c),
            namespace=NAMESPACE,
            kind="ReplicaSet",
            name=name,
            fleet_group=group,
            replicas=replicas,
        )

    def placement(self, node: int, on_host: int) -> NodePlacement:
        return NodePlacement(
            node=f"node-{node:03d}",
            vm_moid=f"vm-{node}",
            bios_uuid=f"4230-{node}",
            instance_uuid=f"5030-{node}",
            host_moid=f"host-{on_host}",
            host_name=host(on_host),
            host_label=host(on_host),
            cluster_moid=VSPHERE_CLUSTER,
            cluster_name="C0",
            datacenter="DC0",
            vcenter=VCENTER,
            observed_at="2026-11-28T00:00:00Z",
            version=1,
        )


def replica(pod: str, on_host: int, vm: str) -> ReplicaPlacement:
    return ReplicaPlacement(
        pod=pod,
        node=f"n-{vm}",
        host_id=fleet_host_id(VCENTER_UUID, f"host-{on_host}", host(on_host)),
        host_name=host(on_host),
        vcenter=VCENTER,
        vsphere_cluster_moid=VSPHERE_CLUSTER,
        vm_moid=vm,
    )


def build(args: argparse.Namespace) -> World:
    world = World(args.nodes, args.clusters, args.groups, args.workloads)
    per_node = [0] * world.nodes
    for w in range(world.workloads):
        for r in range(REPLICAS):
            node = (w * REPLICAS + r) % world.nodes
            per_node[node] += 1
            world.pods.append(pod_object(f"w{w}-{r}", f"w{w}", f"node-{node:03d}", owner=f"w{w}",
                                         affinity=None, namespace=NAMESPACE))  # fmt: skip
    for g in range(world.groups):
        pod = pod_object(f"db-{g}", f"db-{g}", f"node-{g:03d}", owner=f"db-{g}", affinity=None,
                         namespace=NAMESPACE)  # fmt: skip
        pod["metadata"]["labels"][LABEL_FLEET_GROUP] = f"group-{g}"
        world.pods.append(pod)
    for c in range(1, world.clusters):
        for w in range(world.workloads):
            replicas = [
                replica(f"w{w}-{r}", (w * REPLICAS + r + c) % world.nodes, f"vm-{c}-{w}-{r}")
                for r in range(REPLICAS)
            ]
            world.summarise(c, f"w{w}", "", replicas)
        for g in range(world.groups):
            member = replica(f"db-{g}", world.their_host(g, c), f"vm-{c}-db-{g}")
            world.summarise(c, f"db-{g}", f"group-{g}", [member])
    return world


def target(world: World, group: int) -> int | None:
    """A cluster whose member of `group` stays when this cluster's piles onto its host."""
    mine = (ME, f"{NAMESPACE}/db-{group}")
    for c in range(1, world.clusters):
        theirs = (other(c), f"{NAMESPACE}/db-{group}")
        if stayer(f"group-{group}", [mine, theirs]) == theirs:
            return c
    return None


async def fill(nats: NatsServer, world: World) -> None:
    """The topology bucket as the node-labeller writes it, the fleet view as the hub mirrors it."""
    async with nats.connection("bench-fill") as bus:
        topology = await bus.topology()
        for node in range(world.nodes):
            await topology.put_node(world.placement(node, node))
        kv = await bus.js.create_key_value(bucket=FLEET_BUCKET, history=1)
        pending = []
        for key, summary in world.view.items():
            pending.append(kv.put(key, msgspec.json.encode(summary)))
            if len(pending) >= 500:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)


async def samples(
    nats: NatsServer, kube: KubeDouble, world: World, commits: Commits, count: int
) -> tuple[list[float], list[str]]:
    took, missed = [], []
    async with nats.connection("bench-vmotion") as bus:
        topology = await bus.topology()
        for group in range(world.groups):
            if len(took) + len(missed) >= count:
                break
            c = target(world, group)
            if c is None:
                continue
            pod = f"db-{group}"
            started = time.time()
            await topology.put_node(world.placement(group, world.their_host(group, c)))
            deadline = time.monotonic() + 10
            while pod not in commits.evicted and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            if pod in commits.evicted:
                took.append(commits.evicted[pod] - started)
            else:
                missed.append(pod)
            commits.kubelet(kube)
            await asyncio.sleep(0.3)
    return took, missed


async def run(args: argparse.Namespace, workdir: Path) -> None:
    world = build(args)
    groups_in_view = sum(1 for s in world.view.values() if s.fleet_group)
    print(
        f"scale: {args.clusters} clusters x {args.nodes} nodes ({args.nodes} ESXi hosts shared); "
        f"this cluster {len(world.pods)} pods; fleet view {len(world.view)} workloads of "
        f"{args.clusters - 1} other clusters ({groups_in_view} fleet group members, "
        f"{len(world.view) - groups_in_view} workloads of {REPLICAS} replicas in no group); "
        f"{args.samples} samples; {load()}"
    )
    kube = KubeDouble()
    for node in range(world.nodes):
        kube.seed(node_object(f"node-{node:03d}"))
    for pod in world.pods:
        kube.seed(pod)
    await kube.start()
    kubeconfig = kube.write_kubeconfig(workdir / "kubeconfig")
    commits = Commits()
    follower = asyncio.create_task(follow(kube, "pods", commits))
    nats = NatsServer(workdir / "bus")
    (workdir / "bus").mkdir()
    await nats.start()
    try:
        await nats.provision()
        began = time.monotonic()
        await fill(nats, world)
        print(f"topology and fleet view written in {time.monotonic() - began:.1f} s")
        config = descheduler_config(nats, kubeconfig, kubevirt=False)
        config = msgspec.structs.replace(
            config, shared=SharedSettings(cluster=ClusterSettings(name=ME))
        )
        with service("descheduler", config, workdir) as descheduler:
            began = time.monotonic()
            await until(descheduler.ready, f"descheduler ready (see {descheduler.log})", 600)
            print(f"descheduler ready after {time.monotonic() - began:.1f} s")
            await asyncio.sleep(5)  # its first full cycle, and the fleet view's replay
            if commits.evictions:
                print(f"  {commits.evictions} evictions before any sample (none expected)")
            log_from = len(descheduler.log.read_text(errors="replace").splitlines())
            before = commits.evictions
            took, missed = await samples(nats, kube, world, commits, args.samples)
            print(f"vMotion (topology KV put) → Eviction committed; {load()}")
            print(f"  total                                  {ms(took)}")
            cycles = cycle_seconds(descheduler.log, log_from)
            print(f"  descheduler cycles meanwhile (its log) {ms(cycles)}")
            print(
                f"  evictions committed {commits.evictions - before} for "
                f"{len(took) + len(missed)} samples"
            )
            if missed:
                print(f"  no eviction within 10 s: {', '.join(missed)}")
            print(f"peak RSS of the descheduler: {descheduler.peak_rss_mib():.0f} MiB")
            if (code := descheduler.process.poll()) is not None:
                print(f"  descheduler EXITED mid-run (code {code}): {descheduler.log}")
    finally:
        follower.cancel()
        await nats.stop()
        await kube.stop()
    print(f"done; {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--workloads", type=int, default=1500)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--workdir", type=Path, help="keep the descheduler's config and log here")
    args = parser.parse_args()
    if args.groups >= args.nodes:
        parser.error(
            "--groups must be below --nodes (node i holds this cluster's member of group i)"
        )
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args, args.workdir))
        return
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fleet-", dir=shm) as workdir:
        asyncio.run(run(args, Path(workdir)))


if __name__ == "__main__":
    main()
