"""Descheduler benchmark: one decision cycle at Kubernetes' limits, and the evictions it plans.

    uv run --frozen python bench/descheduler_bench.py [--scales 1.0] [--cycles 3] [--latency 0.1]
        [--vmotions 50] [--full-vmotions 10]

The cluster (bench/cluster.py's shape: 5,000 nodes on 500 ESXi hosts in 3 zones, 150,000 pods in
workloads of 10, 10% of pods with pod anti-affinity; the plain workloads' pods, about 85% of all,
carry a topology spread over ESXi hosts, maxSkew 1, DoNotSchedule) is built clean -- every rule
holds -- and then 899 violations are planted, as in the issue's upstream run: 150 anti-affinity
pairs (a replica moved next to another, on the ESXi host or the node), 100 pods on a node their
nodeSelector no longer matches, 649 pods on nodes newly tainted NoSchedule; plus 100 host spreads
piled as a vMotion piles them (two more replicas onto the host of a third: two must go). The
policy is the recorded fixture (tests/fixtures/descheduler/policy-affinity-v1alpha2.yaml) with
the upstream README's RemovePodsViolatingTopologySpreadConstraint profile
(policy-topology-spread-v1alpha2.yaml) after it, both unchanged.

Then `--vmotions` single vMotions, each moving one node's VM onto the ESXi host of a replica its
pod's required host anti-affinity keeps away, and the cycle that follows scoped to the moved node
(median, p99, per strategy), against `--full-vmotions` full cycles after the same kind of move.

Prints: the cycle over the warm cache (median and p99 over `--cycles`, per strategy, each with
the node fit of what it found; the first cycle apart, since it also compiles every pod's spread
constraints once; and the spread strategy's own pass alone), the RSS of this process once
the cluster is built (its Pods and Nodes round-tripped through API JSON, so they share no more
than the informers' decoded ones do), once the descheduler's state is loaded (the difference: the
state and index themselves) and after the first cycle, its peak RSS, whether the decisions
equal the planted set; with several `--scales` (e.g. 0.5,1.0,2.0: 2,500 to 10,000 nodes, the
violations planted in proportion), each scale in turn and then, per strategy, the median per scale
and the growth exponent log(t2/t1)/log(n2/n1) between consecutive scales (1.0: linear in the
cluster). Then all planned evictions of the largest scale through the Kubernetes double (its own
process) with `--latency` seconds added to each eviction call, by the executor with its default
parallelism. Upstream (descheduler v0.36 on a real apiserver, same cluster):
45.5 s per dry-run cycle, 4.85 GB peak, 103 s for the evictions. Never fails on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import math
import os
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from cluster import (
    ANTI_AFFINITY_WORKLOADS,
    FULL_NODES,
    FULL_PODS,
    HOSTNAME,
    MAX_PODS_PER_NODE,
    NAMESPACES,
    NODES_PER_HOST,
    REPLICAS,
    ZONE,
    Cluster,
    feed,
)
from figures import peak_rss_mib, percentile, rss_mib
from kubernetes_asyncio.client import ApiClient, Configuration

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.interpod import incoming_scope
from hostaffinity.affinity.model import (
    Affinity,
    LabelSelector,
    Namespace,
    NodeSpec,
    ObjectMeta,
    OwnerReference,
    PodAffinity,
    PodAffinityTerm,
    PodStatus,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from hostaffinity.descheduler.config import ExecutorSettings
from hostaffinity.descheduler.core.cycle import decide
from hostaffinity.descheduler.core.eviction_planner import (
    Action,
    EvictionPlanner,
    Plan,
    PlannerSettings,
    VmiStays,
)
from hostaffinity.descheduler.core.model import (
    Container,
    DeschedulerNode,
    DeschedulerPod,
    DeschedulerPodSpec,
    NodeCondition,
    NodeStatus,
    PodMeta,
    ResourceRequirements,
    decode_node,
    decode_pod,
)
from hostaffinity.descheduler.core.policy import DEFAULT_POLICY, load_policy, parse_policy
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.triggers import node_scope
from hostaffinity.descheduler.executor import EVICTED, Executor
from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.schema.names import LABEL_ESXI_HOST

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "tests" / "fixtures" / "descheduler" / "policy-affinity-v1alpha2.yaml"
SPREAD_POLICY = POLICY.with_name("policy-topology-spread-v1alpha2.yaml")
PLANTED_PAIRS, PLANTED_NODE_AFFINITY, PLANTED_TAINTS, PLANTED_SPREADS = 150, 100, 649, 100
SPREAD_EXCESS = 2  # three replicas on one host, one on each of seven others: two go
TAINT = Taint(key="maintenance", value="planned", effect="NoSchedule")
TOLERATE = Toleration(key="maintenance", operator="Exists")
CREATED = "2026-11-01T00:00:00Z"


@dataclass
class Planted:
    """The violations put in on purpose: what one cycle must find, no more, no less."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    node_affinity: set[str] = field(default_factory=set)
    taints: set[str] = field(default_factory=set)
    # The replicas piled on one host, per planted spread: SPREAD_EXCESS of them must go.
    spreads: list[tuple[str, ...]] = field(default_factory=list)


@dataclass
class BenchCluster:
    nodes: list[DeschedulerNode]
    placement: dict[str, str]
    namespaces: list[Namespace]
    pods: list[DeschedulerPod]
    planted: Planted


def _node(name: str, labels: dict[str, str], taints: list[Taint]) -> DeschedulerNode:
    return DeschedulerNode(
        metadata=ObjectMeta(name=name, labels=labels),
        spec=NodeSpec(taints=taints),
        status=NodeStatus(
            allocatable={"cpu": "64", "memory": "256Gi", "pods": str(MAX_PODS_PER_NODE)},
            conditions=[NodeCondition(type="Ready", status="True")],
        ),
    )


_RESOURCES = ResourceRequirements(requests={"cpu": "100m", "memory": "128Mi"})
_CONTAINERS = [Container(name="app", resources=_RESOURCES)]


def _pod(
    namespace: str,
    app: str,
    replica: int,
    node: str,
    *,
    affinity: Affinity | None = None,
    node_selector: dict[str, str] | None = None,
    tolerate: bool = False,
    spread: bool = False,
) -> DeschedulerPod:
    owner = OwnerReference(
        kind="ReplicaSet", name=f"{app}-rs", uid=f"{namespace}-{app}", controller=True
    )
    built = DeschedulerPod(
        metadata=PodMeta(
            name=f"{app}-{replica}",
            namespace=namespace,
            uid=f"{namespace}-{app}-{replica}",
            labels={"app": app, "tier": f"t{replica % 3}"},
            owner_references=[owner],
            creation_timestamp=CREATED,
        ),
        spec=DeschedulerPodSpec(
            node_name=node,
            affinity=affinity,
            node_selector=node_selector,
            tolerations=[TOLERATE] if tolerate else [],
            containers=_CONTAINERS,
            topology_spread_constraints=[_host_spread(app)] if spread else [],
        ),
        status=PodStatus(phase="Running"),
    )
    return as_decoded(built)


def _host_spread(app: str) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        max_skew=1,
        topology_key=LABEL_ESXI_HOST,
        when_unsatisfiable="DoNotSchedule",
        label_selector=LabelSelector(match_labels={"app": app}),
    )


def _anti(app: str, key: str, required: bool) -> Affinity:
    term = PodAffinityTerm(
        topology_key=key, label_selector=LabelSelector(match_labels={"app": app})
    )
    if required:
        return Affinity(
            pod_anti_affinity=PodAffinity(
                required_during_scheduling_ignored_during_execution=[term]
            )
        )
    weighted = WeightedPodAffinityTerm(weight=100, pod_affinity_term=term)
    return Affinity(
        pod_anti_affinity=PodAffinity(
            preferred_during_scheduling_ignored_during_execution=[weighted]
        )
    )


def build(scale: float, seed: int = 7) -> BenchCluster:
    rng = random.Random(seed)
    node_count = max(100, int(FULL_NODES * scale))
    pod_count = max(10 * REPLICAS, int(FULL_PODS * scale))
    hosts = max(10, node_count // NODES_PER_HOST)
    # 5% of nodes get the planned-maintenance taint; pods already there tolerate it, except the
    # planted ones. 10% of nodes have fast disks; pods that select them live there.
    all_names = [f"node-{i:05d}" for i in range(node_count)]
    tainted = set(rng.sample(all_names, node_count // 20))
    ssd = set(rng.sample(all_names, node_count // 10))
    nodes, placement = [], {}
    by_host: dict[str, list[str]] = {}
    for i in range(node_count):
        name = f"node-{i:05d}"
        host = f"esx-{i % hosts:04d}"
        labels = {HOSTNAME: name, ZONE: f"zone-{i % 3}", LABEL_ESXI_HOST: host}
        if name in ssd:
            labels["disk"] = "ssd"
        node = _node(name, labels, [TAINT] if name in tainted else [])
        nodes.append(decode_node(_ENCODER.encode(node)))
        placement[name] = host
        by_host.setdefault(host, []).append(name)
    names = [n.metadata.name for n in nodes]
    load = dict.fromkeys(names, 0)
    namespaces = [
        Namespace(
            metadata=ObjectMeta(
                name=f"ns-{i:03d}", labels={"kubernetes.io/metadata.name": f"ns-{i:03d}"}
            )
        )
        for i in range(NAMESPACES)
    ]

    def room(node: str) -> bool:
        return load[node] < MAX_PODS_PER_NODE - 10  # keep slack so planted pods can move

    def place(node: str) -> str:
        load[node] += 1
        return node

    pods: list[DeschedulerPod] = []
    planted = Planted()
    workloads = pod_count // REPLICAS
    anti_workloads = max(1, int(ANTI_AFFINITY_WORKLOADS * scale))
    pair_sources: list[tuple[str, str, str, list[DeschedulerPod]]] = []
    spread_sources: list[list[DeschedulerPod]] = []
    for w in range(workloads):
        namespace = f"ns-{rng.randrange(NAMESPACES):03d}"
        app = f"app-{w:05d}"
        replicas: list[DeschedulerPod] = []
        if w < anti_workloads:
            roll = rng.random()
            key = LABEL_ESXI_HOST if roll < 0.8 else HOSTNAME if roll < 0.9 else ZONE
            required = w % 2 == 0 and key != ZONE  # 10 replicas cannot be apart in 3 zones
            affinity = _anti(app, key, required)
            # Clean: one replica per ESXi host (so per node and per host alike).
            for r, host in enumerate(rng.sample(sorted(by_host), REPLICAS)):
                candidates = [n for n in by_host[host] if n not in tainted and room(n)]
                replicas.append(
                    _pod(namespace, app, r, place(rng.choice(candidates)), affinity=affinity)
                )
            if required:
                pair_sources.append((namespace, app, key, replicas))
        elif w % 15 == 2:
            # Plain replicas without a spread: the node-affinity and taint plants come from
            # these, so moving one never breaks a spread as well.
            for r in range(REPLICAS):
                node = rng.choice(names)
                while not room(node):
                    node = rng.choice(names)
                replicas.append(_pod(namespace, app, r, place(node), tolerate=node in tainted))
        elif w % 15 == 1:
            for r in range(REPLICAS):
                node = rng.choice([n for n in rng.sample(sorted(ssd), 20) if room(n)])
                replicas.append(
                    _pod(
                        namespace,
                        app,
                        r,
                        place(node),
                        node_selector={"disk": "ssd"},
                        tolerate=node in tainted,
                    )
                )
        else:
            # Spread over hosts, maxSkew 1: one replica per host keeps it clean.
            for r, host in enumerate(rng.sample(sorted(by_host), REPLICAS)):
                node = rng.choice([n for n in by_host[host] if room(n)])
                replicas.append(
                    _pod(namespace, app, r, place(node), tolerate=node in tainted, spread=True)
                )
            spread_sources.append(replicas)
        pods.extend(replicas)
    _plant(
        rng, pods, pair_sources, spread_sources, planted, by_host, tainted, ssd, names, load, scale
    )
    return BenchCluster(nodes, placement, namespaces, pods, planted)


_ENCODER = msgspec.json.Encoder()


def as_decoded(pod: DeschedulerPod) -> DeschedulerPod:
    """The pod as the informer holds it: encoded to API JSON and decoded (model.decode_pod).

    The builder hands one label value string, containers list and affinity struct to every
    replica; a decode from the API shares only what the decoder shares, so without this the
    memory figures would be those of a cluster no informer holds.
    """
    return decode_pod(_ENCODER.encode(pod))


def _plant(
    rng: random.Random,
    pods: list[DeschedulerPod],
    pair_sources: list[Any],
    spread_sources: list[list[DeschedulerPod]],
    planted: Planted,
    by_host: dict[str, list[str]],
    tainted: set[str],
    ssd: set[str],
    names: list[str],
    load: dict[str, int],
    scale: float,
) -> None:
    index = {p.key: i for i, p in enumerate(pods)}

    def move(pod: DeschedulerPod, node: str, **spec: Any) -> None:
        load[pod.spec.node_name] -= 1
        load[node] += 1
        new_spec = DeschedulerPodSpec(
            **{
                **{f: getattr(pod.spec, f) for f in pod.spec.__struct_fields__},
                "node_name": node,
                **spec,
            }
        )
        pods[index[pod.key]] = as_decoded(
            DeschedulerPod(metadata=pod.metadata, spec=new_spec, status=pod.status)
        )

    host_of = {n: h for h, members in by_host.items() for n in members}
    pairs = max(1, round(PLANTED_PAIRS * scale))
    for _namespace, _app, key, replicas in rng.sample(pair_sources, pairs):
        first, second = replicas[0], replicas[1]
        anchor = first.spec.node_name
        if key == HOSTNAME:
            target = anchor
        else:
            target = rng.choice(
                [n for n in by_host[host_of[anchor]] if n != anchor and n not in tainted]
            )
        move(second, target)
        planted.pairs.append((first.key, second.key))
    paired = {k for pair in planted.pairs for k in pair}
    # A vMotion piling a spread: two replicas' VMs' pods land on a third replica's host.
    for replicas in rng.sample(spread_sources, max(1, round(PLANTED_SPREADS * scale))):
        host = host_of[replicas[0].spec.node_name]
        for replica in replicas[1 : 1 + SPREAD_EXCESS]:
            move(replica, rng.choice([n for n in by_host[host] if load[n] < MAX_PODS_PER_NODE]))
        planted.spreads.append(tuple(r.key for r in replicas[: 1 + SPREAD_EXCESS]))
        paired.update(r.key for r in replicas)
    plain_pods = [
        p
        for p in pods
        if p.key not in paired
        and p.spec.affinity is None
        and p.spec.node_selector is None
        and not p.spec.tolerations
        and not p.spec.topology_spread_constraints
    ]
    chosen = rng.sample(plain_pods, max(1, round((PLANTED_NODE_AFFINITY + PLANTED_TAINTS) * scale)))
    affinity_count = max(1, round(PLANTED_NODE_AFFINITY * scale))
    non_ssd = [n for n in names if n not in ssd and n not in tainted]
    for pod in chosen[:affinity_count]:
        move(pod, rng.choice(non_ssd), node_selector={"disk": "ssd"})
        planted.node_affinity.add(pod.key)
    taint_targets = sorted(tainted)
    for pod in chosen[affinity_count:]:
        move(pod, rng.choice(taint_targets))
        planted.taints.add(pod.key)


def load_state(cluster: BenchCluster) -> ClusterState:
    """The warm cache: every object handed over as the informers' initial lists would."""
    state = ClusterState()
    feed(Cluster(cluster.nodes, cluster.namespaces, cluster.placement, cluster.pods), state)
    return state


def check(plan: Plan, planted: Planted) -> list[str]:
    """Differences between the decisions and the planted set (empty: equal)."""
    chosen = {a.pod for a in plan.actions}
    problems = []
    for piled in planted.spreads:
        count = len(chosen & set(piled))
        if count != SPREAD_EXCESS:
            problems.append(f"spread piled on {piled}: {count} evicted")
    for pair in planted.pairs:
        count = len(chosen & set(pair))
        if count != 1:
            problems.append(f"pair {pair}: {count} evicted")
    for key in sorted(planted.node_affinity | planted.taints):
        if key not in chosen:
            problems.append(f"{key} not evicted")
    expected = planted.node_affinity | planted.taints | {k for p in planted.pairs for k in p}
    expected |= {k for piled in planted.spreads for k in piled}
    extra = sorted(chosen - expected)
    problems.extend(f"{key} evicted but not planted" for key in extra[:10])
    return problems


async def evict_through_double(
    plan: Plan, state: ClusterState, latency: float, settings: ExecutorSettings
) -> tuple[float, int]:
    """Start the double in its own process, create the planned pods there, evict them all."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.platform.kube_double.serve",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = (await process.stdout.readline()).decode()
        match = re.match(r"KUBE_DOUBLE_URL=(\S+) TOKEN=(\S+)", line)
        assert match, line
        url, token = match.groups()
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            for namespace in sorted({a.namespace for a in plan.actions}):
                await http.post(
                    f"{url}/api/v1/namespaces",
                    json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
            for action in plan.actions:
                namespace, name = action.pod.split("/", 1)
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "nodeName": action.node,
                        "containers": [{"name": "app", "image": "registry.invalid/a"}],
                    },
                }
                async with http.post(f"{url}/api/v1/namespaces/{namespace}/pods", json=body) as r:
                    assert r.status == 201, await r.text()
        configuration = Configuration(host=url)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        async with ApiClient(configuration) as api:
            client = SlowEvictions(api, latency)
            results: dict[str, int] = {}
            done = asyncio.Event()

            async def report(action: Action, result: str) -> None:
                results[result] = results.get(result, 0) + 1
                if sum(results.values()) == len(plan.actions):
                    done.set()

            async def report_stay(_stay: VmiStays) -> None:
                return None

            async def intend(_action: Action) -> bool:  # the API's share only: no bus here
                return True

            planner = EvictionPlanner(PlannerSettings(), load_policy(POLICY).limits)
            executor = Executor(
                client, state, planner, settings, intend, report, report_stay, lambda _reason: None
            )
            runner = asyncio.create_task(executor.run())
            started = time.perf_counter()
            await executor.submit(plan)
            await done.wait()
            seconds = time.perf_counter() - started
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        return seconds, results.get(EVICTED, 0)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)


class SlowEvictions(KubeClient):
    """The client the executor uses, with a fixed delay added to each eviction call."""

    def __init__(self, api: ApiClient, latency: float) -> None:
        super().__init__(api)
        self._latency = latency

    async def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        if path.endswith("/eviction"):
            await asyncio.sleep(self._latency)
        return await super().request(method, path, **kwargs)


@dataclass
class Measured:
    """One scale's cycles: what the growth between scales is computed from."""

    nodes: int
    seconds: list[float]
    cpu: list[float]  # the process's CPU time per cycle: what other load on the machine moves least
    per_strategy: dict[str, list[float]]


def measure(scale: float, cycles: int) -> tuple[Measured, Plan, ClusterState]:
    """Build the cluster at `scale`, load the warm cache, run `cycles` decision cycles."""
    began = time.perf_counter()
    cluster = build(scale)
    built = time.perf_counter() - began
    print(
        f"scale {scale}: {len(cluster.nodes):,} nodes, {len(cluster.pods):,} pods, "
        f"{sum(1 for p in cluster.pods if p.spec.affinity is not None):,} with anti-affinity, "
        f"{sum(1 for p in cluster.pods if p.spec.topology_spread_constraints):,} with a host "
        f"spread; planted {len(cluster.planted.pairs)} pairs, "
        f"{len(cluster.planted.node_affinity)} node affinity, {len(cluster.planted.taints)} "
        f"taints, {len(cluster.planted.spreads)} piled spreads (built in {built:.1f} s, "
        f"RSS {rss_mib():.0f} MiB)"
    )
    began = time.perf_counter()
    state = load_state(cluster)
    del cluster.pods[:]  # the state holds them now, as the informers' caches would
    freeze_gc_after_initial_load()
    print(f"warm cache loaded in {time.perf_counter() - began:.1f} s, RSS {rss_mib():.0f} MiB")
    affinity = load_policy(POLICY)
    policy = dataclasses.replace(
        affinity, profiles=(*affinity.profiles, *load_policy(SPREAD_POLICY).profiles)
    )
    measured = Measured(len(cluster.nodes), [], [], {})
    plans = []
    first = decide(
        state, policy, EvictionPlanner(PlannerSettings(), policy.limits), datetime.now(UTC)
    )
    print(
        f"first cycle (compiles every pod's spreads): {first.seconds:.3f} s, "
        f"RSS {rss_mib():.0f} MiB"
    )
    for _ in range(cycles):
        planner = EvictionPlanner(PlannerSettings(), policy.limits)
        cpu = time.process_time()
        report = decide(state, policy, planner, datetime.now(UTC))
        measured.cpu.append(time.process_time() - cpu)
        measured.seconds.append(report.seconds)
        plans.append(report.plan)
        for name, spent in report.per_strategy.items():
            measured.per_strategy.setdefault(name, []).append(spent)
    seconds = measured.seconds
    print(
        f"decision cycle over {cycles} runs after it: median {statistics.median(seconds):.3f} s, "
        f"p99 {percentile(seconds, 0.99):.3f} s, CPU median "
        f"{statistics.median(measured.cpu):.3f} s (upstream: 45.5 s, without the spread strategy)"
    )
    for name, spent in measured.per_strategy.items():
        print(f"  {name:<60} median {statistics.median(spent):.3f} s")
    # The spread strategy's own pass (finding what to move), without the planner's node fit.
    (spread,) = policy.profiles[-1].strategies
    passes = []
    for _ in range(cycles):
        began = time.perf_counter()
        spread.violations(state)
        passes.append(time.perf_counter() - began)
    print(f"  {spread.name} alone, no node fit: median {statistics.median(passes):.3f} s")
    plan = plans[-1]
    problems = check(plan, cluster.planted)
    print(
        f"decisions: {len(plan.actions)} evictions, {len(plan.skipped)} left alone; "
        f"equal to the planted set: {'yes' if not problems else 'NO'}"
    )
    for problem in problems[:20]:
        print(f"  {problem}")
    print(f"peak RSS so far: {peak_rss_mib():.0f} MiB (upstream: 4.85 GB)")
    return measured, plan, state


def print_growth(runs: list[Measured]) -> None:
    """Per strategy and for the cycle: the median per scale and the growth exponent
    log(t2/t1) / log(n2/n1) between consecutive scales (1: linear in the cluster, 2: square),
    of the medians and of the fastest cycles (the figure a loaded machine disturbs least)."""
    rows = {"cycle": [r.seconds for r in runs], "cycle, CPU time": [r.cpu for r in runs]}
    for name in runs[0].per_strategy:
        rows[name] = [r.per_strategy[name] for r in runs]
    nodes = [r.nodes for r in runs]

    def exponents(times: list[float]) -> str:
        return ", ".join(
            f"{math.log(t2 / t1) / math.log(n2 / n1):.2f}"
            for (n1, t1), (n2, t2) in itertools.pairwise(zip(nodes, times, strict=True))
        )

    print("growth: median per scale (nodes); exponent between consecutive scales")
    for name, samples in rows.items():
        medians = [statistics.median(s) for s in samples]
        cells = "; ".join(f"{n:,}: {t:.3f} s" for n, t in zip(nodes, medians, strict=True))
        fastest = exponents([min(s) for s in samples])
        print(f"  {name:<55} {cells}; exponent {exponents(medians)} (fastest: {fastest})")


def vmotions(state: ClusterState, count: int, seed: int = 11) -> list[tuple[str, str]]:
    """(node, ESXi host) moves that each put a pod with required host anti-affinity onto the
    host of a replica its term keeps away: one new anti-affinity pair per move at least."""
    index = state.index
    moves = []
    for record in index.pods():
        for term in record.terms.required_anti if record.terms else ():
            if term.topology_key != LABEL_ESXI_HOST:
                continue
            own = index.domain(record.node, LABEL_ESXI_HOST)
            for other in index.matching_pods(incoming_scope(term, index.namespaces), term.selector):
                host = index.domain(other.node, LABEL_ESXI_HOST)
                if other.key != record.key and host is not None and host != own:
                    moves.append((record.node, host))
                    break
    return random.Random(seed).sample(sorted(set(moves)), count)


def measure_vmotions(state: ClusterState, count: int, full: int, shipped: bool) -> None:
    """One vMotion at a time (moved, decided, moved back) in a cluster without violations: the
    cycle it triggers, scoped to the moved node (and the node moved back before it), against a
    full cycle after the same kind of move. Each cycle has its own planner, so no cooldown or
    limit carries over. `shipped`: the service's built-in policy (RemoveDuplicates too) instead
    of the bench's."""
    if shipped:
        policy = parse_policy(DEFAULT_POLICY)
    else:
        affinity = load_policy(POLICY)
        policy = dataclasses.replace(
            affinity, profiles=(*affinity.profiles, *load_policy(SPREAD_POLICY).profiles)
        )
    anti = policy.profiles[0].strategies[0].name
    # A first full cycle of this policy compiles its spreads; the pods it would evict are then
    # removed, as their evictions would, so each move starts from a cluster with no violation.
    first = decide(
        state, policy, EvictionPlanner(PlannerSettings(), policy.limits), datetime.now(UTC)
    )
    for action in first.plan.actions:
        state.remove_pod(action.pod)
    print(f"the planted violations' {len(first.plan.actions)} pods removed, as if evicted")
    scoped: list[float] = []
    whole: list[float] = []
    per_strategy: dict[str, list[float]] = {}
    found: list[int] = []
    previous: str | None = None
    for position, (node, host) in enumerate(vmotions(state, count + full)):
        back = state.index.domain(node, LABEL_ESXI_HOST)
        state.set_placement(node, host)
        scope = node_scope(node)
        if previous is not None:
            scope.absorb(node_scope(previous))
        planner = EvictionPlanner(PlannerSettings(), policy.limits)
        judged = None if position < full else scope
        report = decide(state, policy, planner, datetime.now(UTC), judged)
        if judged is None:
            whole.append(report.seconds)
        else:
            scoped.append(report.seconds)
            found.append(sum(1 for a in report.plan.actions if a.strategy == anti))
            for name, spent in report.per_strategy.items():
                per_strategy.setdefault(name, []).append(spent)
        state.set_placement(node, back)
        previous = node
    parts = []  # `--vmotions 0` or `--full-vmotions 0` leaves its part out
    if whole:
        parts.append(
            f"full cycle over {full} moves median {statistics.median(whole):.3f} s, "
            f"p99 {percentile(whole, 0.99):.3f} s"
        )
    if scoped:
        parts.append(
            f"scoped cycle over {count} moves median {statistics.median(scoped):.4f} s, p99 "
            f"{percentile(scoped, 0.99):.4f} s; anti-affinity evictions planned per move: "
            f"{min(found)}-{max(found)}"
        )
    if parts:
        print(
            "one vMotion (a node's VM onto the host of a replica its pod's required host "
            "anti-affinity keeps away): " + "; ".join(parts)
        )
    for name, spent in per_strategy.items():
        print(
            f"  {name:<60} median {statistics.median(spent):.4f} s, "
            f"p99 {percentile(spent, 0.99):.4f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scales", default="1.0", help="comma-separated, ascending: e.g. 0.5,1.0,2.0"
    )
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--vmotions", type=int, default=50, help="scoped cycles timed (0: none)")
    parser.add_argument("--full-vmotions", type=int, default=10, help="full cycles timed (0: none)")
    parser.add_argument(
        "--shipped-policy",
        action="store_true",
        help="time the vMotions' cycles with the service's built-in policy (RemoveDuplicates too)",
    )
    args = parser.parse_args()
    scales = sorted(float(s) for s in args.scales.split(","))
    runs = []
    for position, scale in enumerate(scales):
        measured, plan, state = measure(scale, args.cycles)
        runs.append(measured)
        if position < len(scales) - 1:
            del plan, state  # the next scale is built without this one's cache in memory
    if len(runs) > 1:
        print_growth(runs)
    settings = ExecutorSettings()
    spent, evicted = asyncio.run(evict_through_double(plan, state, args.latency, settings))
    print(
        f"evictions at scale {scales[-1]} through the double, {args.latency * 1000:.0f} ms added "
        f"per call, parallelism {settings.parallelism}: {evicted}/{len(plan.actions)} evicted in "
        f"{spent:.2f} s, {evicted / spent:.0f}/s (upstream: 103 s)"
    )
    measure_vmotions(state, args.vmotions, args.full_vmotions, args.shipped_policy)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
