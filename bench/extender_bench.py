"""scheduler-extender benchmark: CPU per pod and latency, requests as kube-scheduler sends them.

    uv run --frozen python bench/extender_bench.py [--scale 1.0] [--pods 2000] [--groups 1000]
                                                   [--names-only]

Builds bench/cluster.py's cluster (5,000 nodes / 150,000 pods at scale 1.0) into the extender's
cache in a child process that serves the real HTTP server (the shipped verbs: filter and
prioritize), so the extender's own CPU time is measured apart from the client's. Then:

1. pods no host-level term concerns (Deployment replicas without anti-affinity), and
2. pods with required ESXi-host anti-affinity, each as kube-scheduler v1.36 calls the extender
   with nodeCacheCapable: true: filter with the ~500 node names `numFeasibleNodesToFind` leaves
   at 5,000 nodes (rotating start), prioritize with those that passed;
3. the same with nodeCacheCapable: false and percentageOfNodesToScore: 100: the full NodeList
   of 5,000 kubelet-sized nodes (~11 KB each) in every filter;
4. 1,000 groups of 5 anti-affine replicas created at once, through the kube-scheduler emulation
   (tests/platform/kube_scheduler.py: binding cycles in the background, 0-50 ms), binds going
   to a stub API server: filter latency including any in-flight wait, and the wait's own p99
   from the extender's `hostaffinity_extender_inflight_wait_seconds` histogram.

Prints the extender's CPU per pod (plain and concerned pods apart), median and p99 per verb, and
peak RSS. `--names-only` runs phases 1 and 2 alone (a full NodeList phase takes minutes on a
busy two-core machine). Never fails on timing.
"""

from __future__ import annotations

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import msgspec
from aiohttp import web
from cluster import Cluster, Workload, build_cluster, feed, make_pod
from figures import peak_rss_mib, percentile
from kubernetes_asyncio.client import ApiClient, Configuration
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.model import Pod
from hostaffinity.runtime.bus.sampled import SampledPublisher
from hostaffinity.runtime.kube.client import KubeClient
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.core.cache import SOURCES, ExtenderCache
from hostaffinity.scheduler_extender.http import ExtenderServer
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics
from hostaffinity.schema import LABEL_ESXI_HOST, EventFactory
from tests.platform.kube_scheduler import (
    ExtenderConfig,
    KubeScheduler,
    feasible_nodes_to_find,
)
from tests.platform.kubelet_nodes import kubelet_node

WAIT_METRIC = "hostaffinity_extender_inflight_wait"

# -- the extender, in a child process -------------------------------------------------------------


def _wait_histogram(reader: InMemoryMetricReader) -> HistogramDataPoint | None:
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == WAIT_METRIC:
                    points = list(metric.data.data_points)
                    return points[0] if points else None  # type: ignore[return-value]
    return None


def _bucket_p99(point: HistogramDataPoint | None) -> str:
    if point is None or point.count == 0:
        return "no filter waited"
    rank, seen = 0.99 * point.count, 0
    for bound, count in zip(
        (*point.explicit_bounds, float("inf")), point.bucket_counts, strict=True
    ):
        seen += count
        if seen >= rank:
            return f"{point.count} filters waited, p99 <= {bound * 1e3:g} ms"
    return "?"


def serve_extender(cluster: Cluster, conn: Connection) -> None:
    """The child: the cluster in an ExtenderCache, the HTTP server; answers `cpu` and `wait`."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    cache = ExtenderCache()
    feed(cluster, cache)
    for source in SOURCES:
        cache.add_sync_check(source, lambda: True)
    freeze_gc_after_initial_load()  # as the service does once its informers have synced

    async def main() -> None:
        async def publish(_event: object) -> None:
            return None

        decisions = SampledPublisher("scheduler-extender", publish, ratio=0.0, capacity=1)
        async with ApiClient(Configuration(host="http://127.0.0.1:9")) as api:
            binder = Binder(KubeClient(api), 1.0)  # bindVerb is not shipped: never called
            server = ExtenderServer(
                cache, binder, ExtenderMetrics(cache), decisions, EventFactory("scheduler-extender")
            )
            await server.start("127.0.0.1", 0)
            done = asyncio.Event()

            def command() -> None:
                asked = conn.recv()
                if asked == "cpu":
                    conn.send(time.process_time())
                elif asked == "wait":
                    conn.send(_bucket_p99(_wait_histogram(reader)))
                elif asked == "rss":
                    conn.send(peak_rss_mib())
                else:
                    done.set()

            asyncio.get_running_loop().add_reader(conn.fileno(), command)
            conn.send(server.port)
            await done.wait()
            await server.stop()

    asyncio.run(main())


class Extender:
    """The parent's handle on the child process."""

    def __init__(self, cluster: Cluster) -> None:
        self._conn, child = multiprocessing.Pipe()
        context = multiprocessing.get_context("fork")
        self._process = context.Process(target=serve_extender, args=(cluster, child))
        self._process.start()
        self.url = f"http://127.0.0.1:{self._conn.recv()}"

    def ask(self, what: str) -> Any:
        self._conn.send(what)
        return self._conn.recv()

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(30)


# -- requests as kube-scheduler sends them ----------------------------------------------------


def pod_object(pod: Pod) -> dict[str, Any]:
    """The pod as kube-scheduler's cache holds it (managedFields trimmed): containers with
    resources, env and mounts, volumes, tolerations, status; ~3 KB."""
    obj: dict[str, Any] = json.loads(msgspec.json.encode(pod))
    container = {
        "name": "app",
        "image": f"registry.example.com/{pod.metadata.labels.get('app', 'x')}:v1.2.3",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(10)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "1", "memory": "512Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                         {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io"}],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }  # fmt: skip
    obj["spec"].update(
        containers=[container],
        volumes=[{"name": "config", "configMap": {"name": "app-config"}},
                 {"name": "token", "projected": {"sources": [{"serviceAccountToken": {
                     "expirationSeconds": 3607, "path": "token"}}]}}],
        serviceAccountName="default",
        schedulerName="default-scheduler",
        tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                      "effect": "NoExecute", "tolerationSeconds": 300}],
    )  # fmt: skip
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{pod.metadata.labels['app']}-rs",
         "uid": f"rs-{pod.metadata.namespace}-{pod.metadata.labels['app']}", "controller": True}
    ]  # fmt: skip
    obj["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    return obj


class Candidates:
    """The nodes kube-scheduler sends: `numFeasibleNodesToFind` from a rotating start."""

    def __init__(self, names: list[str], percentage: int = 0) -> None:
        self._names = names
        self._count = feasible_nodes_to_find(len(names), percentage)
        self._start = 0

    def next(self) -> list[str]:
        names, start = self._names, self._start
        picked = (names[start:] + names[:start])[: self._count]
        self._start = (start + self._count) % len(names)
        return picked


async def play(
    extender: Extender,
    pods: list[Pod],
    body: Callable[[bytes, list[str]], bytes],
    candidates: Candidates,
) -> tuple[float, dict[str, list[float]]]:
    """filter then prioritize per pod, one after another; returns the extender's CPU seconds
    per pod and each verb's latencies."""
    samples: dict[str, list[float]] = {"filter": [], "prioritize": []}
    bodies = [(json.dumps(pod_object(pod)).encode(), candidates.next()) for pod in pods]
    async with aiohttp.ClientSession() as http:

        async def post(verb: str, data: bytes) -> Any:
            began = time.perf_counter()
            async with http.post(f"{extender.url}/{verb}", data=data) as response:
                answer = await response.read()
            samples[verb].append(time.perf_counter() - began)
            assert response.status == 200, answer[:300]
            return msgspec.json.decode(answer)

        cpu = extender.ask("cpu")
        for pod_json, names in bodies:
            answer = await post("filter", body(pod_json, names))
            passed = answer["NodeNames"]
            if passed is None:
                passed = [item["metadata"]["name"] for item in answer["Nodes"]["items"]]
            await post("prioritize", body(pod_json, passed))
        cpu = extender.ask("cpu") - cpu
    return cpu / len(pods), samples


def names_body(pod_json: bytes, names: list[str]) -> bytes:
    return b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + json.dumps(names).encode() + b"}"


def full_nodes_body(items: dict[str, bytes]) -> Callable[[bytes, list[str]], bytes]:
    def body(pod_json: bytes, names: list[str]) -> bytes:
        nodes = b",".join(items[name] for name in names)
        head = b'{"Pod":' + pod_json + b',"Nodes":{"metadata":{},"items":['
        return head + nodes + b']},"NodeNames":null}'

    return body


def report(title: str, cpu_per_pod: float, samples: dict[str, list[float]]) -> None:
    print(f"{title}: extender CPU {cpu_per_pod * 1e3:.3f} ms per pod (all verbs)")
    for verb, seconds in samples.items():
        print(
            f"  {verb:<11} median {statistics.median(seconds) * 1e3:7.3f} ms"
            f"   p99 {percentile(seconds, 0.99) * 1e3:7.3f} ms   ({len(seconds)} calls)"
        )


# -- the burst through the kube-scheduler emulation -------------------------------------------


@asynccontextmanager
async def stub_apiserver() -> AsyncIterator[str]:
    """Answers pods/binding with 201 and pods/status patches with 200, as an apiserver does."""

    async def bind(_request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "code": 201}, status=201)

    async def status(_request: web.Request) -> web.Response:
        return web.json_response({"kind": "Pod", "apiVersion": "v1"})

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{namespace}/pods/{name}/binding", bind)
    app.router.add_patch("/api/v1/namespaces/{namespace}/pods/{name}/status", status)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def burst(extender: Extender, cluster: Cluster, groups: int) -> None:
    nodes = [{"metadata": {"name": n.metadata.name, "labels": n.metadata.labels}}
             for n in cluster.nodes]  # fmt: skip
    pods = []
    for g in range(groups):
        workload = Workload(f"ns-{g % 100:03d}", f"burst-{g:04d}", 5, LABEL_ESXI_HOST, True)
        for r in range(5):
            obj = pod_object(make_pod(workload, r, ""))
            obj["metadata"]["uid"] = f"burst-{g}-{r}"
            pods.append(obj)
    random.Random(11).shuffle(pods)
    async with stub_apiserver() as api, aiohttp.ClientSession() as http:
        scheduler = KubeScheduler(
            http, api_url=api, token="bench", extender=ExtenderConfig(url=extender.url),
            nodes=nodes, rng=random.Random(13),
        )  # fmt: skip
        wall = time.perf_counter()
        outcome = await scheduler.run(pods)
        wall = time.perf_counter() - wall
        await scheduler.close()
    filters = [(c.t1 - c.t0) / 1e3 for c in outcome.calls if c.verb == "filter"]
    hosts: dict[str, set[str]] = {}
    for pod, node in outcome.placed.items():
        hosts.setdefault(pod.rsplit("-", 1)[0], set()).add(cluster.placement[node])
    spread = sum(1 for placed in hosts.values() if len(placed) == 5)
    print(
        f"{groups} anti-affine groups of 5 created at once, through the kube-scheduler emulation:"
        f" {len(outcome.placed)} placed in {wall:.1f} s, {spread} of {groups} groups on 5 hosts,"
        f" {len(outcome.errors())} errors"
    )
    print(
        f"  filter      median {statistics.median(filters) * 1e3:7.3f} ms"
        f"   p99 {percentile(filters, 0.99) * 1e3:7.3f} ms (in-flight wait included)"
    )
    print(f"  in-flight wait: {extender.ask('wait')}")


async def run(scale: float, pod_count: int, groups: int, seed: int, names_only: bool) -> None:
    start = time.perf_counter()
    cluster = build_cluster(scale, seed)
    extender = Extender(cluster)
    names = [n.metadata.name for n in cluster.nodes]
    print(
        f"scale {scale}: {len(names)} nodes, {len(set(cluster.placement.values()))} ESXi hosts, "
        f"{len(cluster.pods)} pods; extender up in {time.perf_counter() - start:.1f} s"
    )
    plain = [w for w in cluster.workloads if w.topology_key is None]
    anti = [w for w in cluster.workloads if w.topology_key == LABEL_ESXI_HOST and w.required]
    unconcerned = [make_pod(plain[i % len(plain)], 9000 + i, "") for i in range(pod_count)]
    concerned = [make_pod(anti[i % len(anti)], 9000 + i, "") for i in range(pod_count)]
    window = feasible_nodes_to_find(len(names))
    try:
        cpu, samples = await play(extender, unconcerned, names_body, Candidates(names))
        report(f"{pod_count} unconcerned pods, NodeNames ({window} nodes)", cpu, samples)
        cpu, samples = await play(extender, concerned, names_body, Candidates(names))
        report(f"{pod_count} concerned pods, NodeNames ({window} nodes)", cpu, samples)
        if names_only:
            return
        items = {name: json.dumps(kubelet_node(name, i)).encode() for i, name in enumerate(names)}
        size = sum(len(item) for item in items.values()) / 2**20
        full = full_nodes_body(items)
        few = max(20, pod_count // 20)
        cpu, samples = await play(extender, unconcerned[:few], full, Candidates(names, 100))
        report(
            f"{few} unconcerned pods, full NodeList of {len(names)} ({size:.0f} MiB)", cpu, samples
        )
        cpu, samples = await play(extender, concerned[:few], full, Candidates(names, 100))
        report(
            f"{few} concerned pods, full NodeList of {len(names)} ({size:.0f} MiB)", cpu, samples
        )
        await burst(extender, cluster, groups)
        rss = extender.ask("rss")
        print(f"peak RSS: extender {rss:.0f} MiB, bench client {peak_rss_mib():.0f} MiB")
    finally:
        extender.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 5,000 nodes / 150k pods")
    parser.add_argument("--pods", type=int, default=2000, help="pods per phase (2 calls each)")
    parser.add_argument("--groups", type=int, default=1000, help="anti-affine groups of 5")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--names-only", action="store_true", help="only the NodeNames phases (CPU per pod)"
    )
    args = parser.parse_args()
    asyncio.run(run(args.scale, args.pods, args.groups, args.seed, args.names_only))


if __name__ == "__main__":
    main()
