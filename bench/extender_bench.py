"""scheduler-extender benchmark: the HTTP server at the engine bench's cluster, one call at a time.

    uv run --frozen python bench/extender_bench.py [--scale 1.0] [--pods 300]

Builds bench/cluster.py's cluster (5,000 nodes / 150,000 pods at scale 1.0) into the extender's
cache, starts the real HTTP server, and plays kube-scheduler with nodeCacheCapable: true: for each
incoming pod (half with anti-affinity) POST /filter with every node's name (the worst case: the
scheduler usually sends fewer), POST /prioritize with the nodes that passed, POST /bind to the best
one; strictly one request after another. The binding goes to a stub API endpoint answering 201,
so /bind's figure is the extender's own cost plus one loopback round trip, not an apiserver's.
Prints median and p99 per verb, requests per second, and peak RSS (the cluster's decoded Pod and
Node objects included, as the informers would hold them). Never fails on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import msgspec
from aiohttp import web
from cluster import build_cluster, feed, make_pod
from figures import peak_rss_mib, percentile
from kubernetes_asyncio.client import ApiClient, Configuration

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.runtime.kube import KubeClient
from hostaffinity.scheduler_extender.binder import Binder
from hostaffinity.scheduler_extender.cache import SOURCES, ExtenderCache
from hostaffinity.scheduler_extender.decisions import DecisionPublisher
from hostaffinity.scheduler_extender.http import ExtenderServer
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics


@asynccontextmanager
async def stub_apiserver() -> AsyncIterator[str]:
    """Answers every pods/binding with the 201 Status a real apiserver sends."""

    async def bind(_request: web.Request) -> web.Response:
        status = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        return web.json_response(status, status=201)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{namespace}/pods/{name}/binding", bind)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def run(scale: float, pods: int, seed: int) -> None:
    cluster = build_cluster(scale, seed)
    start = time.perf_counter()
    cache = ExtenderCache()
    feed(cluster, cache)
    for source in SOURCES:
        cache.add_sync_check(source, lambda: True)
    # As the extender should once its informers have synced: no full GC over the cluster.
    freeze_gc_after_initial_load()
    print(
        f"scale {scale}: {len(cluster.nodes)} nodes, {len(set(cluster.placement.values()))} ESXi "
        f"hosts, {len(cluster.pods)} pods; cache built in {time.perf_counter() - start:.1f} s, "
        f"RSS {peak_rss_mib():.0f} MiB"
    )
    anti = [w for w in cluster.workloads if w.topology_key is not None]
    plain = [w for w in cluster.workloads if w.topology_key is None]
    incoming = [
        make_pod(anti[i // 2 % len(anti)] if i % 2 else plain[i // 2 % len(plain)], 9000 + i, "")
        for i in range(pods)
    ]
    names = [n.metadata.name for n in cluster.nodes]
    samples: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}
    feasible: list[int] = []

    async with stub_apiserver() as api_url, ApiClient(Configuration(host=api_url)) as api:

        async def publish(_event: object) -> None:
            return None

        decisions = DecisionPublisher(publish, ratio=0.0, capacity=1, on_drop=lambda: None)
        binder = Binder(KubeClient(api), 10.0)
        server = ExtenderServer(cache, binder, ExtenderMetrics(cache), decisions)
        await server.start("127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as http:

            async def post(verb: str, body: bytes) -> object:
                began = time.perf_counter()
                async with http.post(f"{base}/{verb}", data=body) as response:
                    answer = await response.read()
                samples[verb].append(time.perf_counter() - began)
                assert response.status == 200, answer
                return json.loads(answer)

            wall = time.perf_counter()
            for pod in incoming:
                pod_json = msgspec.json.encode(pod).decode()
                # Body text built outside the timing, as kube-scheduler encodes before it sends.
                filter_body = f'{{"Pod":{pod_json},"Nodes":null,"NodeNames":{json.dumps(names)}}}'
                answer = await post("filter", filter_body.encode())
                assert isinstance(answer, dict)
                passed = answer["NodeNames"]
                feasible.append(len(passed))
                body = f'{{"Pod":{pod_json},"Nodes":null,"NodeNames":{json.dumps(passed)}}}'
                scores = await post("prioritize", body.encode())
                assert isinstance(scores, list)
                best = max(scores, key=lambda s: s["Score"])["Host"]
                binding = {
                    "PodName": pod.metadata.name,
                    "PodNamespace": pod.metadata.namespace,
                    "PodUID": pod.metadata.uid,
                    "Node": best,
                }
                await post("bind", json.dumps(binding).encode())
            wall = time.perf_counter() - wall
        await server.stop()

    print(
        f"{pods} incoming pods (half with anti-affinity), filter over all {len(names)} nodes, "
        f"feasible per pod: median {statistics.median(feasible):.0f}"
    )
    for verb, seconds in samples.items():
        print(
            f"  {verb:<11} median {statistics.median(seconds) * 1e3:7.3f} ms"
            f"   p99 {percentile(seconds, 0.99) * 1e3:7.3f} ms"
            f"   max {max(seconds) * 1e3:7.3f} ms"
        )
    calls = sum(len(s) for s in samples.values())
    print(f"  {calls} requests in {wall:.2f} s: {calls / wall:.0f} requests/s, one at a time")
    print(f"  peak RSS {peak_rss_mib():.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 5,000 nodes / 150k pods")
    parser.add_argument("--pods", type=int, default=300, help="incoming pods (3 calls each)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(run(args.scale, args.pods, args.seed))


if __name__ == "__main__":
    main()
