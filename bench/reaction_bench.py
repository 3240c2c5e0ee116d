"""End-to-end reaction times at Kubernetes' limits: the real services on vcsim, the Kubernetes
double and the shipped three-server TLS bus (R3).

    uv run --frozen python bench/reaction_bench.py [--nodes 5000] [--pods 150000] [--samples 100]
                                                   [--clusters 10]

The world: vcsim with `--nodes` node VMs on `--nodes`/10 ESXi hosts in `--clusters` vSphere
clusters (every node a VM of vcsim); the Kubernetes double (in this process, so every write's
commit time is read exactly) holding a Node per VM and `--pods` pods, 30 per node in workloads of
10 with each replica on its own ESXi host (nothing violated): 10% of the workloads with pod
anti-affinity as bench/cluster.py mixes it (80% on the ESXi-host key, 10% hostname, 10% zone;
half required, the zone ones preferred); the bus as `NatsCluster` starts it from k8s/base/nats.
The node-labeller, the descheduler and the drs-translator each run as their own process from
their console script, with the configs the e2e harnesses build (default settings) and the
product's Lease timings, as in a cluster where each has its pod.

Two reactions, `--samples` each, one at a time:
- vMotion → eviction requested: the VM of a node holding one replica of a two-replica workload
  with required anti-affinity on the ESXi-host key is moved (RelocateVM_Task) to the host of the
  other replica's node; from the task's completeTime to the descheduler's Eviction of one of
  the two committed in the double. Also: to the node's label patch committed (the labeller's part).
- pod created → DRS rule: the second replica of such a workload is created (POST, bound to a node
  on another host of the same cluster); from its creation committed in the double to the
  completeTime of the reconfigure task on its vSphere cluster after which a DRS anti-affinity
  rule holds both VMs.
Then vcsim's own floor at the same inventory: a bare RelocateVM_Task until a plain
WaitForUpdatesEx client sees it, and a bare ReconfigureComputeResource_Task adding a rule.

Prints p50/p99/max of each, the descheduler's cycle times (its log), each service's peak RSS,
and the load average at the start and the end. Never fails on timing.
"""

from __future__ import annotations

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml
from figures import percentile
from pyVmomi import vim, vmodl
from vcsim_reads import Placement, labeller_floor, read_placement, relocate, simulator_floor

from hostaffinity.runtime.process.config import HealthSettings, LeaseSettings, Settings
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.descheduler_harness import descheduler_config, node_object, pod_object
from tests.e2e.drs_harness import drs_config
from tests.e2e.labeller_harness import labeller_config
from tests.platform.console import SCRIPTS
from tests.platform.kube_double import KubeDouble
from tests.platform.kube_double.store import Change
from tests.platform.nats import free_port
from tests.platform.nats_cluster import NatsCluster, running_cluster
from tests.platform.vcsim import Vcsim, build_vcsim, start_vcsim

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
NODES_PER_HOST = 10
REPLICAS = 10
ANTI_AFFINITY_SHARE = 10  # one workload in 10
NAMESPACES = 20
BENCH_NS = "bench"
SAMPLE_TIMEOUT_S = 30.0
# "cycle (full): ..." or "cycle (scoped to 1 nodes, 0 pods, 0 departed): ...", its seconds last
CYCLE_LINE = re.compile(r"cycle \([^)]*\): \d+ violations, \d+ actions.* in ([\d.]+)s")


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


# -- the world ------------------------------------------------------------------------------


@dataclass
class World:
    """What the double is seeded with, and the pairs the samples act on (node names)."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    # vMotion samples: (workload, node whose VM moves, node on the target host).
    moves: list[tuple[str, str, str]] = field(default_factory=list)
    # DRS samples: (workload, node of the seeded replica, node of the replica to create).
    rules: list[tuple[str, str, str]] = field(default_factory=list)


def anti_affinity(app: str, key: str, required: bool) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    weighted = {"weight": 100, "podAffinityTerm": term}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}}


def background_affinity(index: int, app: str) -> dict[str, Any] | None:
    """bench/cluster.py's mix: one workload in ten anti-affine, 80/10/10 host/hostname/zone,
    half required (zone always preferred: ten replicas cannot sit in ten of three zones)."""
    if index % ANTI_AFFINITY_SHARE:
        return None
    kind = (index // ANTI_AFFINITY_SHARE) % 10
    key = LABEL_ESXI_HOST if kind < 8 else HOSTNAME if kind == 8 else ZONE
    required = key != ZONE and (index // ANTI_AFFINITY_SHARE) % 2 == 0
    return anti_affinity(app, key, required)


def plan_world(placement: Placement, pods: int, samples: int) -> World:
    """Every replica of a workload on its own host, nodes filled round-robin; then the sample
    pairs, each on two hosts of one vSphere cluster, every node used by at most one sample and
    none kept apart already by another workload's host anti-affinity (`sample_pair`)."""
    world = World()
    by_host: dict[str, list[str]] = {}
    for vm, host in sorted(placement.vm_host.items()):
        by_host.setdefault(host, []).append(vm)
    hosts = sorted(by_host)
    taken = dict.fromkeys(hosts, 0)

    def next_node(host: str) -> str:
        nodes = by_host[host]
        taken[host] += 1
        return nodes[taken[host] % len(nodes)]

    for index in range(pods // REPLICAS):
        app = f"app-{index:05d}"
        namespace = f"ns-{index % NAMESPACES:02d}"
        affinity = background_affinity(index, app)
        for replica in range(REPLICAS):
            host = hosts[(index * REPLICAS + replica) % len(hosts)]
            world.pods.append(
                pod_object(
                    f"{app}-{replica}",
                    app,
                    next_node(host),
                    owner=f"{app}-rs",
                    affinity=affinity,
                    namespace=namespace,
                )
            )
    used: set[str] = set()
    kept_apart = host_apart_workloads(world.pods)
    residents = {host: list(nodes) for host, nodes in by_host.items()}  # after the moves planned
    clusters = sorted(set(placement.host_cluster.values()))
    for index in range(2 * samples):
        cluster_hosts = [
            h for h in placement.hosts_of_cluster(clusters[index % len(clusters)]) if h in by_host
        ]
        first = cluster_hosts[(index // len(clusters)) % len(cluster_hosts)]
        second = cluster_hosts[
            (index // len(clusters) + len(cluster_hosts) // 2) % len(cluster_hosts)
        ]
        moving = index % 2 == 0
        pair = sample_pair(residents[first], residents[second], used, kept_apart, moving)
        used.update(pair)
        if moving:
            residents[first].remove(pair[0])
            residents[second].append(pair[0])
        target = world.moves if moving else world.rules
        target.append((f"{'react' if moving else 'drs'}-{index // 2:03d}", *pair))
    for app, first, second in world.moves:
        for replica, node in enumerate((first, second)):
            world.pods.append(bench_pod(app, replica, node))
    for app, first, _ in world.rules:
        world.pods.append(bench_pod(app, 0, first))
    return world


def host_apart_workloads(pods: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Node → the workloads with required anti-affinity on the ESXi-host key it holds a replica
    of: what the descheduler evicts for after a vMotion and the drs-translator, at its default
    settings, keeps apart with DRS rules."""
    found: dict[str, set[str]] = {}
    for pod in pods:
        anti = (pod["spec"].get("affinity") or {}).get("podAntiAffinity", {})
        terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
        if any(term["topologyKey"] == LABEL_ESXI_HOST for term in terms):
            found.setdefault(pod["spec"]["nodeName"], set()).add(pod["metadata"]["labels"]["app"])
    return found


def sample_pair(
    first: list[str],
    second: list[str],
    used: set[str],
    kept_apart: dict[str, set[str]],
    moving: bool,
) -> tuple[str, str]:
    """The first free nodes of the two hosts whose sample starts a violation of its own
    workload only (`kept_apart`: `host_apart_workloads`). A DRS sample's two nodes hold no
    replicas of one such workload: else their VMs have a DRS rule already, the sample's rule is
    contained in it and never sent, and no reconfigure follows the pod. A vMotion sample's
    moving node shares none with any node of the target host: else the move also puts those
    replicas in violation and the cycle measured evicts them too. The round-robin fill can put
    the anti-affine workloads on the same few nodes of each host (at 200 nodes on 20 hosts, 24
    of them on both of a pair's nodes), so the first free nodes may be such a pair."""
    for one in (n for n in first if n not in used):
        mine = kept_apart.get(one, set())
        for other in (n for n in second if n not in used):
            company = second if moving else [other]
            if all(mine.isdisjoint(kept_apart.get(node, ())) for node in company):
                return one, other
    raise RuntimeError(
        f"no free node on the host of {first[0]} that no host anti-affinity keeps from "
        f"{'the host of ' if moving else 'a free node on the host of '}{second[0]}: "
        "fewer samples or more nodes"
    )


def bench_pod(app: str, replica: int, node: str) -> dict[str, Any]:
    return pod_object(
        f"{app}-{replica}",
        app,
        node,
        owner=f"{app}-rs",
        affinity=anti_affinity(app, LABEL_ESXI_HOST, True),
        namespace=BENCH_NS,
    )


def seed(kube: KubeDouble, placement: Placement, world: World) -> None:
    for index in range(NAMESPACES):
        kube.seed(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns-{index:02d}"}}
        )
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NS}})
    for index, name in enumerate(sorted(placement.vm)):
        kube.seed(node_object(name, {HOSTNAME: name, ZONE: f"zone-{index % 3}"}))
    for pod in world.pods:
        kube.seed(pod)
    kube.compact()  # the seeds are no history a watch could start from


# -- what the double sees -------------------------------------------------------------------


@dataclass
class Commits:
    """When the double committed what the samples wait for (epoch seconds, Change.at)."""

    created: dict[str, float] = field(default_factory=dict)  # pod name → ADDED
    evicted: dict[str, float] = field(default_factory=dict)  # pod name → deletionTimestamp set
    labelled: dict[str, list[float]] = field(default_factory=dict)  # node → host label changed
    evictions: int = 0
    # Evicted pods the kubelet has not removed yet: (namespace, name).
    terminating: list[tuple[str, str]] = field(default_factory=list)

    def take(self, change: Change) -> None:
        meta = change.obj["metadata"]
        if change.storage == "nodes":
            old = (change.prev or {}).get("metadata", {}).get("labels", {}).get(LABEL_ESXI_HOST)
            if change.prev is not None and meta.get("labels", {}).get(LABEL_ESXI_HOST) != old:
                self.labelled.setdefault(meta["name"], []).append(change.at)
        elif change.type == "ADDED":
            self.created[meta["name"]] = change.at
        elif meta.get("deletionTimestamp") and not (change.prev or {})["metadata"].get(
            "deletionTimestamp"
        ):
            self.evicted.setdefault(meta["name"], change.at)
            self.evictions += 1
            self.terminating.append((meta["namespace"], meta["name"]))

    def kubelet(self, kube: KubeDouble) -> None:
        """Remove the evicted pods, as their kubelet does once their grace period (1 s) is over:
        a pod left Terminating would keep its violation, and every later cycle would judge it
        again."""
        while self.terminating:
            namespace, name = self.terminating.pop()
            kube.delete("v1", "pods", name, namespace)


async def follow(kube: KubeDouble, storage: str, commits: Commits) -> None:
    _, sub = kube.store.subscribe(storage, kube.store.rv)
    try:
        while True:
            commits.take(await sub.queue.get())
    finally:
        kube.store.unsubscribe(sub)


# -- the services, each its own process -----------------------------------------------------


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    health_port: int
    log: Path

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2):
                return True
        except OSError:
            return False

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0


@contextlib.contextmanager
def service(name: str, config: Settings, workdir: Path) -> Iterator[Service]:
    """`hostaffinity-<name> --config <file>` with this config written out; SIGTERM at the end."""
    port = free_port()
    # The product's Lease timings (client-go's 15 s / 10 s / 2 s): a service whose loop stalls
    # past the renew deadline steps down and exits, and the bench says so (`exited`).
    config = msgspec.structs.replace(
        config,
        health=HealthSettings(host="127.0.0.1", port=port),
        lease=LeaseSettings(namespace="kube-system"),
    )
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(msgspec.to_builtins(config)), encoding="utf-8")
    log = workdir / f"{name}.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HOSTAFFINITY_")}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(SCRIPTS / f"hostaffinity-{name}"), "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        yield Service(name, process, port, log)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def until(check: Any, what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


# -- vCenter's side of the DRS samples ------------------------------------------------------


class ClusterTasks(threading.Thread):
    """A plain pyVmomi client following TaskManager.recentTask (WaitForUpdatesEx): every task on
    a ClusterComputeResource, with its completeTime and when this client saw it."""

    def __init__(self, si: Any) -> None:
        super().__init__(daemon=True)
        self.si = si
        self.done: list[tuple[str, float, float]] = []  # (cluster moid, completeTime, seen)
        self.stop = threading.Event()

    def run(self) -> None:
        content = self.si.RetrieveContent()
        collector = content.propertyCollector.CreatePropertyCollector()
        pc = vmodl.query.PropertyCollector
        spec = pc.FilterSpec(
            objectSet=[pc.ObjectSpec(obj=content.taskManager)],
            propSet=[pc.PropertySpec(type=vim.TaskManager, pathSet=["recentTask"])],
        )
        collector.CreateFilter(spec, partialUpdates=False)
        seen: set[str] = set()
        version = ""
        while not self.stop.is_set():
            update = collector.WaitForUpdatesEx(version, pc.WaitOptions(maxWaitSeconds=1))
            if update is None:
                continue
            version = update.version
            now = time.time()
            tasks = [
                task
                for fs in update.filterSet
                for obj in fs.objectSet
                for change in obj.changeSet
                for task in change.val or []
            ]
            for task in tasks:
                if task._moId in seen:
                    continue
                seen.add(task._moId)
                info = task.info
                if isinstance(info.entity, vim.ClusterComputeResource) and info.state == "success":
                    self.done.append((info.entity._moId, info.completeTime.timestamp(), now))


def rule_holds(si: Any, cluster: str, vms: set[str]) -> bool:
    """A DRS anti-affinity rule of the cluster names both VMs."""
    config = vim.ClusterComputeResource(cluster, si._stub).configurationEx
    return any(
        isinstance(rule, vim.cluster.AntiAffinityRuleSpec)
        and vms <= {vm._moId for vm in rule.vm or ()}
        for rule in config.rule or ()
    )


def bare_reconfigure(si: Any, cluster: str, vms: list[str], name: str) -> float:
    """A rule added by hand: seconds from the call to its task's completion."""
    rule = vim.cluster.AntiAffinityRuleSpec(
        name=name, enabled=True, vm=[vim.VirtualMachine(vm, si._stub) for vm in vms]
    )
    spec = vim.cluster.ConfigSpecEx(rulesSpec=[vim.cluster.RuleSpec(operation="add", info=rule)])
    started = time.time()
    task = vim.ClusterComputeResource(cluster, si._stub).ReconfigureComputeResource_Task(
        spec=spec, modify=True
    )
    info = task.info
    while info.state not in ("success", "error"):
        time.sleep(0.001)
        info = task.info
    return float(info.completeTime.timestamp()) - started


# -- the samples ----------------------------------------------------------------------------


@dataclass
class Samples:
    total: list[float] = field(default_factory=list)
    part: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


async def vmotion_samples(
    si: Any, kube: KubeDouble, placement: Placement, world: World, commits: Commits
) -> Samples:
    samples = Samples()
    for app, node, other in world.moves:
        pods = (f"{app}-0", f"{app}-1")
        labelled_before = len(commits.labelled.get(node, []))
        target = placement.vm_host[other]
        completed = await asyncio.to_thread(relocate, si, placement.vm[node], target)
        deadline = time.monotonic() + SAMPLE_TIMEOUT_S
        waiting = True
        while waiting:  # polls what the follower records
            await asyncio.sleep(0.002)
            waiting = not any(p in commits.evicted for p in pods) and time.monotonic() < deadline
        evicted = [commits.evicted[p] for p in pods if p in commits.evicted]
        if not evicted:
            samples.missed.append(app)
            continue
        samples.total.append(min(evicted) - completed)
        labels = commits.labelled.get(node, [])
        if len(labels) > labelled_before:
            samples.part.append(labels[labelled_before] - completed)
        await asyncio.sleep(1.0)  # the cycle's other evictions (collateral) are sent
        commits.kubelet(kube)
        # One sample at a time: the deletions' own work (a drs-translator plan and reconfigure,
        # whose vCenter changes vcsim hands every watching collector) ends before the next move.
        await asyncio.sleep(1.0)
    return samples


async def drs_samples(
    vc: Vcsim, si: Any, kube: KubeDouble, placement: Placement, world: World, commits: Commits
) -> Samples:
    tasks = ClusterTasks(vc.connect())
    tasks.start()
    samples = Samples()
    headers = {"Authorization": f"Bearer {kube.token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        for app, first, second in world.rules:
            cluster = placement.host_cluster[placement.vm_host[second]]
            vms = {placement.vm[first], placement.vm[second]}
            body = bench_pod(app, 1, second)
            cursor = len(tasks.done)
            async with http.post(
                f"{kube.url}/api/v1/namespaces/{BENCH_NS}/pods", json=body
            ) as response:
                assert response.status == 201, await response.text()
            while (created := commits.created.get(body["metadata"]["name"])) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
            deadline = time.monotonic() + SAMPLE_TIMEOUT_S
            found = None
            while found is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
                while found is None and cursor < len(tasks.done):
                    moid, complete, seen = tasks.done[cursor]
                    cursor += 1
                    if (
                        moid == cluster
                        and complete >= created
                        and await asyncio.to_thread(rule_holds, si, cluster, vms)
                    ):
                        found = complete, seen
            if found is None:
                samples.missed.append(app)
                continue
            samples.total.append(found[0] - created)
            samples.part.append(found[1] - found[0])  # vcsim's ticker, for this observer
    tasks.stop.set()
    return samples


# -- the run --------------------------------------------------------------------------------


def ms(values: list[float]) -> str:
    if not values:
        return "no samples"
    scaled = [v * 1000 for v in values]
    return (
        f"p50 {statistics.median(scaled):7.1f}  p99 {percentile(scaled, 0.99):7.1f}"
        f"  max {max(scaled):7.1f} ms  ({len(values)} samples)"
    )


def cycle_seconds(log: Path, since_line: int) -> list[float]:
    lines = log.read_text(errors="replace").splitlines()[since_line:]
    return [float(m[1]) for line in lines if (m := CYCLE_LINE.search(line))]


async def run(args: argparse.Namespace, workdir: Path) -> None:
    print(
        f"scale: {args.nodes} node VMs and Nodes on {args.nodes // NODES_PER_HOST} ESXi hosts in "
        f"{args.clusters} vSphere clusters, {args.pods} pods, {args.samples} samples each; "
        f"{load()}"
    )
    started = time.monotonic()
    hosts_per_cluster = max(2, args.nodes // NODES_PER_HOST // args.clusters)
    vc: Vcsim = start_vcsim(
        build_vcsim(),
        workdir,
        [
            "-listen=127.0.0.1:0",
            "-login=user:pass",
            f"-clusters={args.clusters}",
            f"-hosts={hosts_per_cluster}",
            f"-vms={args.nodes}",
        ],
        600,
    )
    try:
        admin = vc.connect()
        placement = await asyncio.to_thread(read_placement, admin)
        print(f"vcsim ready in {time.monotonic() - started:.1f} s")
        world = plan_world(placement, args.pods, args.samples)
        kube = KubeDouble()
        began = time.monotonic()
        seed(kube, placement, world)
        print(
            f"double seeded in {time.monotonic() - began:.1f} s: {len(placement.vm)} Nodes, "
            f"{len(world.pods)} pods"
        )
        await kube.start()
        kubeconfig = kube.write_kubeconfig(workdir / "kubeconfig")
        commits = Commits()
        followers = [
            asyncio.create_task(follow(kube, storage, commits)) for storage in ("pods", "nodes")
        ]
        async with running_cluster(workdir / "bus") as nats:
            await measure(
                args, workdir, vc, admin, placement, world, kube, kubeconfig, nats, commits
            )
        for task in followers:
            task.cancel()
        await kube.stop()
    finally:
        vc.stop()


async def measure(
    args: argparse.Namespace,
    workdir: Path,
    vc: Vcsim,
    admin: Any,
    placement: Placement,
    world: World,
    kube: KubeDouble,
    kubeconfig: Path,
    nats: NatsCluster,
    commits: Commits,
) -> None:
    configs = {
        "node-labeller": labeller_config(vc, nats, kubeconfig),
        "descheduler": descheduler_config(nats, kubeconfig),
        "drs-translator": drs_config(vc, nats, kubeconfig),
    }
    with contextlib.ExitStack() as stack:
        began = time.monotonic()
        services = {
            name: stack.enter_context(service(name, config, workdir))
            for name, config in configs.items()
        }
        for item in services.values():
            await until(item.ready, f"{item.name} ready (see {item.log})", 900)
            print(f"{item.name} ready after {time.monotonic() - began:.1f} s")
        await until(lambda: quiet(commits), "the start-up work to end", 600)
        print(f"settled after {time.monotonic() - began:.1f} s; {load()}")
        log = services["descheduler"].log
        log_from = len(log.read_text(errors="replace").splitlines())
        moves = await vmotion_samples(admin, kube, placement, world, commits)
        print(f"vMotion (RelocateVM_Task completeTime) → Eviction committed; {load()}")
        print(f"  total                                     {ms(moves.total)}")
        print(f"  completeTime → node label patch committed {ms(moves.part)}")
        print(f"  descheduler cycles meanwhile (its log)    {ms(cycle_seconds(log, log_from))}")
        print(f"  evictions committed (all pods)            {commits.evictions}")
        if moves.missed:
            print(f"  no eviction within {SAMPLE_TIMEOUT_S:.0f} s: {', '.join(moves.missed)}")
        drs = services["drs-translator"]
        plans_before = await asyncio.to_thread(plan_seconds, drs.health_port)
        rules = await drs_samples(vc, admin, kube, placement, world, commits)
        plans = await asyncio.to_thread(plan_seconds, drs.health_port)
        print(f"pod created (committed) → reconfigure task complete, rule there; {load()}")
        print(f"  total                                     {ms(rules.total)}")
        print(f"  completeTime → seen by a plain client     {ms(rules.part)}")
        count, spent = plans[0] - plans_before[0], plans[1] - plans_before[1]
        if count:
            print(
                f"  drs-translator plans meanwhile            {count:.0f}, "
                f"mean {spent / count * 1000:.1f} ms"
            )
        if rules.missed:
            print(f"  no rule within {SAMPLE_TIMEOUT_S:.0f} s: {', '.join(rules.missed)}")
        for item in services.values():
            print(f"peak RSS of {item.name}: {item.peak_rss_mib():.0f} MiB")
            if (code := item.process.poll()) is not None:
                print(f"  {item.name} EXITED mid-run (code {code}; lost its Lease?): {item.log}")
    floors(vc, admin, placement, world, max(10, args.samples // 5))
    print(f"done; {load()}")


def plan_seconds(port: int) -> tuple[float, float]:
    """The drs-translator's plans so far: (count, seconds), from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = dict.fromkeys(("_count", "_sum"), 0.0)
    for line in text.splitlines():
        for suffix in found:
            if line.startswith(f"hostaffinity_drs_plan_duration_seconds{suffix}"):
                found[suffix] += float(line.rsplit(" ", 1)[1])
    return found["_count"], found["_sum"]


def quiet(commits: Commits, for_seconds: float = 5.0) -> bool:
    """No label patch and no eviction committed for a while: the start-up work is over."""
    now = time.time()
    latest = [t for times in commits.labelled.values() for t in times]
    latest += commits.evicted.values()
    time.sleep(for_seconds)
    after = [t for times in commits.labelled.values() for t in times] + list(
        commits.evicted.values()
    )
    return len(after) == len(latest) and all(t < now for t in after)


def floors(vc: Vcsim, admin: Any, placement: Placement, world: World, count: int) -> None:
    """vcsim's own part, at the same inventory, the services stopped: a bare vMotion (a sampled
    VM back to its first host) seen by a plain client watching `runtime.host` and by one watching
    the node-labeller's VM feed with its other feed followed beside (vcsim collects every filter
    again per change, so this is the labeller's floor), and a bare reconfigure adding a rule."""
    moves = [(placement.vm[node], placement.vm_host[node]) for _, node, _ in world.moves]
    count = max(1, min(count, len(moves) // 2))  # each floor moves VMs of its own
    seen = simulator_floor(vc.connect(), admin, moves[:count])
    seen_by_labeller = labeller_floor(vc.connect, admin, moves[count : 2 * count])
    reconfigure = []
    for index, (_, first, second) in enumerate(world.rules[:count]):
        cluster = placement.host_cluster[placement.vm_host[second]]
        vms = [placement.vm[first], placement.vm[second]]
        reconfigure.append(bare_reconfigure(admin, cluster, vms, f"bench-floor-{index}"))
    print("vcsim's own floor at this inventory:")
    print(f"  bare RelocateVM_Task → WaitForUpdatesEx   {ms(seen)}")
    print(f"  the same, the labeller's VM feed         {ms(seen_by_labeller)}")
    print(f"  bare ReconfigureComputeResource_Task     {ms(reconfigure)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument(
        "--workdir", type=Path, help="keep the services' configs and logs here (default: temp)"
    )
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args, args.workdir))
        return
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="reaction-", dir=shm) as workdir:
        asyncio.run(run(args, Path(workdir)))


if __name__ == "__main__":
    main()
