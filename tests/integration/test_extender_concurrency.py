"""scheduler-extender under kube-scheduler's concurrency (tests/platform/kube_scheduler.py): a
pod's binding cycle runs while the next pods are filtered, yet anti-affine replicas created at
once land on distinct ESXi hosts; a lagging pod informer costs no `Error`.

Real parts: the extender as main() wires it, a real nats-server (placements in the topology KV),
the Kubernetes double (binds, the pod informer's watch). The nodes carry no ESXi-host label, as
when the node-labeller's patches have not landed: only the extender knows the hosts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv import TopologyStore
from hostaffinity.schema import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.e2e.labeller_harness import eventually, node_object
from tests.integration.extender_harness import RunningExtender, extender
from tests.platform.bus_values import node_placement as placement
from tests.platform.kube_double import KubeDouble
from tests.platform.kube_scheduler import Binding, Call, ExtenderConfig, KubeScheduler, Outcome
from tests.platform.nats import NatsServer
from tests.recorded_fixtures import fixture_dir

FIXTURE = fixture_dir("kube-scheduler-extender") / "burst-call-sequence.json"
HOSTNAME = "kubernetes.io/hostname"
_examples = itertools.count()


@dataclass(frozen=True)
class Topology:
    """Nodes (API objects, no host label) and the ESXi host each runs on."""

    nodes: list[dict[str, Any]]
    host: dict[str, str]


async def topology(
    kube: KubeDouble, kv: TopologyStore, ext: RunningExtender, prefix: str, hosts: int, per: int
) -> Topology:
    """Nodes `<prefix>-h<i>-n<j>` seeded in the API, their placements in the KV; returns once
    the extender knows both."""
    host = {f"{prefix}-h{h}-n{n}": f"{prefix}-esx{h}" for h in range(hosts) for n in range(per)}
    nodes = []
    for name, esx in host.items():
        node = node_object(name)
        node["metadata"]["labels"] = {HOSTNAME: name}
        nodes.append(kube.seed(node))
        await kv.put_node(placement(name, esx))
    await eventually(
        lambda: all(ext.cache.host_of(n) == h for n, h in host.items())
        and all(ext.cache.index.has_node(n) for n in host),
        "the extender knows the nodes and their hosts",
    )
    return Topology(nodes, host)


def replica(namespace: str, group: str, index: int, key: str) -> dict[str, Any]:
    """One of a group's replicas: required anti-affinity to its own group on `key`; on the
    hostname key with the physical opt-in annotation."""
    term = {"labelSelector": {"matchLabels": {"group": group}}, "topologyKey": key}
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"} if key == HOSTNAME else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{index}", "namespace": namespace,
                     "labels": {"group": group}, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/pause:3"}],
                 "affinity": {"podAntiAffinity": {
                     "requiredDuringSchedulingIgnoredDuringExecution": [term]}}},
    }  # fmt: skip


def plain(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "plain"}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/pause:3"}]},
    }


def namespace(kube: KubeDouble, name: str) -> str:
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture
async def running_ext(
    kube_double: KubeDouble, nats_server: NatsServer, bus: Bus, tmp_path: Path
) -> AsyncIterator[RunningExtender]:
    kubeconfig = kube_double.write_kubeconfig(tmp_path / "kubeconfig")
    async with extender(nats_server, kubeconfig) as running:
        yield running


async def schedule(
    kube: KubeDouble,
    ext: RunningExtender,
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    *,
    binding: Binding,
    rng: random.Random,
    bind_verb: bool = False,
    node_cache_capable: bool = True,
) -> Outcome:
    """Pods created at once (as stored, with uids), then scheduled by the emulation."""
    stored = [kube.seed(pod) for pod in pods]
    config = ExtenderConfig(
        url=f"http://127.0.0.1:{ext.server.port}",
        bind_verb=bind_verb,
        node_cache_capable=node_cache_capable,
    )
    async with aiohttp.ClientSession() as http:
        scheduler = KubeScheduler(
            http, api_url=kube.url, token=kube.token, extender=config, nodes=nodes,
            binding=binding, rng=rng,
        )  # fmt: skip
        try:
            return await scheduler.run(stored)
        finally:
            await scheduler.close()


def overlapping_pairs(calls: list[Call]) -> tuple[int, int]:
    """(pairs, overlapping): consecutive pods in scheduling order, and how many had the next
    pod's filter start before the previous pod's bind was answered."""
    filters = [c for c in calls if c.verb == "filter"]
    binds = {c.pod: c for c in calls if c.verb == "bind"}
    pairs = [(a, b) for a, b in itertools.pairwise(filters) if a.pod in binds]
    return len(pairs), sum(1 for a, b in pairs if b.t0 < binds[a.pod].t1)


def scheduling_is_serial(calls: list[Call]) -> bool:
    """No two filter/prioritize calls overlap, and each pod's bind starts after its prioritize."""
    cycle = sorted((c for c in calls if c.verb != "bind"), key=lambda c: c.t0)
    serial = all(a.t1 <= b.t0 for a, b in itertools.pairwise(cycle))
    prioritized = {c.pod: c.t1 for c in calls if c.verb == "prioritize"}
    return serial and all(c.t0 >= prioritized[c.pod] for c in calls if c.verb == "bind")


def recorded_calls() -> list[Call]:
    recording = json.loads(FIXTURE.read_text(encoding="utf-8"))
    fields = ("verb", "pod", "t0", "t1", "status", "error", "passed", "node")
    return [Call(**{k: call[k] for k in fields if k in call}) for call in recording["calls"]]


async def test_the_emulation_produces_the_recorded_burst_interleaving(
    kube_double: KubeDouble, bus: Bus, running_ext: RunningExtender
) -> None:
    recorded = recorded_calls()
    pairs, overlapping = overlapping_pairs(recorded)
    assert scheduling_is_serial(recorded)
    assert overlapping / pairs > 0.9  # the recording: 99 of 100 pods

    # The recorded workload: 48 nodes on 8 ESXi hosts, the pods in the recorded order, 6 groups
    # of 5 replicas with hostname anti-affinity under the opt-in, bindVerb as recorded.
    kv = await bus.topology()
    cluster = await topology(kube_double, kv, running_ext, "burst", hosts=8, per=6)
    ns = namespace(kube_double, "burst")
    pods = [
        replica(ns, c.pod.rsplit("-", 1)[0], int(c.pod.rsplit("-", 1)[1]), HOSTNAME)
        if c.pod.startswith("g") else plain(ns, c.pod)
        for c in recorded if c.verb == "filter"
    ]  # fmt: skip
    outcome = await schedule(
        kube_double, running_ext, cluster.nodes, pods,
        binding=Binding(), rng=random.Random(7), bind_verb=True,
    )  # fmt: skip

    assert scheduling_is_serial(outcome.calls)
    pairs, overlapping = overlapping_pairs(outcome.calls)
    assert pairs == 99
    assert overlapping / pairs > 0.9, (overlapping, pairs)
    assert len(outcome.placed) == 100
    assert outcome.errors() == []
    groups: dict[str, list[str]] = {}
    for pod, node in outcome.placed.items():
        if pod.startswith(f"{ns}/g"):
            groups.setdefault(pod.rsplit("-", 1)[0], []).append(cluster.host[node])
    assert len(groups) == 6
    assert all(len(set(hosts)) == len(hosts) == 5 for hosts in groups.values()), groups


@dataclass(frozen=True)
class Burst:
    hosts: int
    per_host: int
    replicas: int
    key: str
    node_cache_capable: bool
    never: float
    fail: float
    seed: int


@st.composite
def bursts(draw: st.DrawFn) -> Burst:
    hosts = draw(st.integers(2, 5))
    crowded = draw(st.booleans())
    # More replicas than hosts: every host needs a second node so that each refused replica
    # reaches the extender (kube-scheduler's own filter takes the nodes holding a replica).
    per_host = draw(st.integers(2, 3) if crowded else st.integers(1, 3))
    replicas = draw(st.integers(hosts + 1, hosts * per_host) if crowded else st.integers(1, hosts))
    return Burst(
        hosts=hosts,
        per_host=per_host,
        replicas=replicas,
        key=draw(st.sampled_from([LABEL_ESXI_HOST, HOSTNAME])),
        node_cache_capable=draw(st.booleans()),
        # A binding cycle that never ends holds its host for the reservation's age (30 s):
        # only with no more replicas than hosts, where a host is left for every other one.
        never=0.0 if crowded else draw(st.sampled_from([0.0, 0.2])),
        fail=draw(st.sampled_from([0.0, 0.2])),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(burst=bursts())
async def test_anti_affine_replicas_created_at_once_land_on_distinct_hosts(
    kube_double: KubeDouble, bus: Bus, running_ext: RunningExtender, burst: Burst
) -> None:
    example = f"ex{next(_examples)}"
    kv = await bus.topology()
    cluster = await topology(
        kube_double, kv, running_ext, example, hosts=burst.hosts, per=burst.per_host
    )
    ns = namespace(kube_double, example)
    pods = [replica(ns, "web", i, burst.key) for i in range(burst.replicas)]
    outcome = await schedule(
        kube_double, running_ext, cluster.nodes, pods,
        binding=Binding(never=burst.never, fail=burst.fail), rng=random.Random(burst.seed),
        node_cache_capable=burst.node_cache_capable,
    )  # fmt: skip

    hosts = [cluster.host[node] for node in outcome.placed.values()]
    assert len(set(hosts)) == len(hosts), outcome.placed
    if burst.replicas <= burst.hosts:
        assert outcome.unschedulable == {}
        assert len(outcome.placed) + len(outcome.assumed_forever) == burst.replicas
    else:
        assert len(outcome.placed) == burst.hosts
        assert len(outcome.unschedulable) == burst.replicas - burst.hosts
        for reasons in outcome.unschedulable.values():
            assert any(LABEL_ESXI_HOST in why for why in reasons.values()), reasons
    assert [c for c in outcome.errors() if c.verb != "bind"] == []


async def create_at_once(
    kube: KubeDouble, pods: list[dict[str, Any]], created: asyncio.Queue[dict[str, Any] | None]
) -> None:
    """POST every pod with 32 requests in flight, as the recorded burst's client did; each
    created pod goes to the scheduler's queue, then None."""
    url = f"{kube.url}/api/v1/namespaces/{{}}/pods"
    headers = {"Authorization": f"Bearer {kube.token}"}
    pending = iter(pods)

    async def client(http: aiohttp.ClientSession) -> None:
        for pod in pending:
            async with http.post(url.format(pod["metadata"]["namespace"]), json=pod,
                                 headers=headers) as response:  # fmt: skip
                assert response.status == 201, await response.text()
                await created.put(await response.json())

    async with aiohttp.ClientSession() as http, asyncio.TaskGroup() as group:
        for _ in range(32):
            group.create_task(client(http))
    await created.put(None)


async def fall_behind(kube: KubeDouble, plural: str) -> None:
    """The API's watch of `plural` falls behind for 300 ms, then catches up, again and again."""
    while True:
        kube.hold_watches(plural)
        await asyncio.sleep(0.3)
        kube.release_watches(plural)
        await asyncio.sleep(0.05)


async def test_a_2000_pod_burst_while_the_pod_informer_lags_gets_no_error(
    kube_double: KubeDouble, bus: Bus, running_ext: RunningExtender
) -> None:
    kv = await bus.topology()
    cluster = await topology(kube_double, kv, running_ext, "big", hosts=10, per=10)
    ns = namespace(kube_double, "big")
    pods = [plain(ns, f"p-{i:04d}") for i in range(1800)]
    pods += [replica(ns, f"g{g:02d}", r, LABEL_ESXI_HOST) for g in range(40) for r in range(5)]
    random.Random(3).shuffle(pods)
    pod_informer = running_ext.feeds.informers[0]
    unseen = 0  # filters of a pod the extender's informer had not reported yet

    async def sent(_: object, __: object, request: aiohttp.TraceRequestStartParams) -> None:
        nonlocal unseen
        if request.url.path == "/filter":
            unseen += scheduler.current not in pod_informer.cache

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(sent)
    config = ExtenderConfig(url=f"http://127.0.0.1:{running_ext.server.port}")
    created: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    async with aiohttp.ClientSession(trace_configs=[trace]) as http:
        scheduler = KubeScheduler(
            http, api_url=kube_double.url, token=kube_double.token, extender=config,
            nodes=cluster.nodes, rng=random.Random(5),
        )  # fmt: skip
        creating = asyncio.create_task(create_at_once(kube_double, pods, created))
        lagging_watch = asyncio.create_task(fall_behind(kube_double, "pods"))
        try:
            outcome = await scheduler.run(arriving=created)
        finally:
            lagging_watch.cancel()
            kube_double.release_watches("pods")
            await scheduler.close()
            await creating

    assert unseen > 200, f"only {unseen} filters met a lagging informer: the test proves nothing"
    assert outcome.errors() == []
    assert len(outcome.placed) == 2000
    groups: dict[str, set[str]] = {}
    for pod, node in outcome.placed.items():
        if pod.startswith(f"{ns}/g"):
            groups.setdefault(pod.rsplit("-", 1)[0], set()).add(cluster.host[node])
    assert all(len(hosts) == 5 for hosts in groups.values())
