"""What the descheduler's placement summary costs at Kubernetes' documented limits.

    uv run --frozen python bench/placement_summary_bench.py [--scale 1.0] [--moves 200]

The descheduler bench's cluster (scale 1.0: 5,000 nodes on 500 hosts, 150,000 pods in
workloads of ~10 replicas) loaded into the descheduler's state; its summary published into a
real nats-server (one, on loopback, sync_interval always as shipped). Prints: the first pass
(every workload computed and written), a restart's pass (the bucket read back, nothing
written), vMotions (one node's VM to another host: its workloads rewritten), the bucket's size
and this process's memory.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)
from descheduler_bench import build, load_state
from figures import peak_rss_mib, percentile, rss_mib

from hostaffinity.descheduler.placement_summary import PlacementSummary
from hostaffinity.schema import PLACEMENTS_BUCKET, NodePlacement
from tests.platform.nats import NatsServer


def placement(node: str, host: str) -> NodePlacement:
    return NodePlacement(
        node=node, vm_moid=f"vm-{node}", bios_uuid="", instance_uuid="",
        host_moid=f"host-{host}", host_name=f"{host}.example", host_label=host,
        cluster_moid="domain-c1", cluster_name="c1", datacenter="dc", vcenter="vc",
        observed_at="", version=1, vcenter_uuid="0b6e8a3c-1f5e-4c7a-9d0e-2a1b3c4d5e6f",
    )  # fmt: skip


async def run(scale: float, moves: int) -> None:
    cluster = build(scale)
    state = load_state(cluster)
    hosts = sorted(set(cluster.placement.values()))
    print(
        f"scale {scale}: {len(cluster.nodes)} nodes on {len(hosts)} hosts, "
        f"{len(state.pods)} pods, {len(state.workloads)} workloads"
    )
    before = rss_mib()
    summary = PlacementSummary(state, "bench-cluster", interval_seconds=0)
    for node, host in cluster.placement.items():
        summary.placement_changed(node, placement(node, host))
    with tempfile.TemporaryDirectory() as workdir:
        server = NatsServer(Path(workdir))
        await server.start()
        try:
            await server.provision()
            async with server.connection("bench") as bus:
                kv = await bus.js.key_value(PLACEMENTS_BUCKET)
                started = time.perf_counter()
                await summary.flush(kv)
                first = time.perf_counter() - started
                info = await bus.js.stream_info(f"KV_{PLACEMENTS_BUCKET}")
                print(
                    f"first pass: {summary.writes} summaries written in {first:.1f} s "
                    f"({summary.writes / first:.0f}/s); bucket {info.state.messages} keys, "
                    f"{info.state.bytes / 2**20:.1f} MiB"
                )
                restarted = PlacementSummary(state, "bench-cluster", interval_seconds=0)
                for node, host in cluster.placement.items():
                    restarted.placement_changed(node, placement(node, host))
                started = time.perf_counter()
                await restarted.load(kv)
                loaded = time.perf_counter() - started
                started = time.perf_counter()
                await restarted.flush(kv)
                compared = time.perf_counter() - started
                print(
                    f"restart: bucket read back in {loaded:.1f} s, pass in {compared:.1f} s, "
                    f"{restarted.writes} written, {restarted.deletes} deleted"
                )
                rng = random.Random(3)
                samples, written = [], []
                nodes = sorted(cluster.placement)
                for _ in range(moves):
                    node = rng.choice(nodes)
                    writes = summary.writes
                    started = time.perf_counter()
                    summary.placement_changed(node, placement(node, rng.choice(hosts)))
                    await summary.flush(kv)
                    samples.append((time.perf_counter() - started) * 1000)
                    written.append(summary.writes - writes)
                print(
                    f"vMotion ({moves} moves): pass p50 {percentile(samples, 0.5):.1f} ms, "
                    f"p99 {percentile(samples, 0.99):.1f} ms; summaries written per move "
                    f"p50 {percentile(written, 0.5):.0f}, max {max(written)}"
                )
        finally:
            await server.stop()
    print(
        f"memory: the summary's own state {rss_mib() - before:.0f} MiB over the loaded "
        f"descheduler state; peak RSS {peak_rss_mib():.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--moves", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.scale, args.moves))


if __name__ == "__main__":
    main()
