"""drs-translator planner at the reaction bench's shape: 150,000 pods on 5,000 node VMs.

bench/cluster.py's cluster at `--scale` (1.0: 5,000 nodes on 500 ESXi hosts, 150,000 pods in
workloads of 10, 1,500 of them anti-affine: 600 required on the ESXi-host key), its hosts in
`--clusters` vSphere clusters of one vCenter. The index is built once, as the translator's
informers keep it, and the garbage collector frozen as the service freezes it once they have
synced; then the plan the translator makes after each burst of changes is timed
(median and p99 of `--runs`), and the longest stretch the event loop could not run anything
else while planning (a ticker task beside it measures the gaps between its turns).

    uv run --frozen python bench/drs_plan_bench.py [--scale 1.0] [--clusters 10] [--runs 20]
"""

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from cluster import build_cluster, feed
from figures import peak_rss_mib, percentile

from hostaffinity.affinity.index import ClusterIndex, freeze_gc_after_initial_load
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.core.plan import Plan, PlannerSettings
from hostaffinity.drs_translator.core.planner import Planning, asks_for_placement
from hostaffinity.schema import EsxiHost, NodePlacement

SETTINGS = PlannerSettings(vcenter="bench", install="bench")


def topology(
    placement: dict[str, str], clusters: int
) -> tuple[dict[str, NodePlacement], dict[str, EsxiHost]]:
    """Each node a VM on the host cluster.py placed it on; host i in vSphere cluster i mod N."""
    labels = sorted(set(placement.values()))
    cluster_of = {label: f"domain-c{i % clusters}" for i, label in enumerate(labels)}
    hosts = {
        label: EsxiHost(
            moid=label,
            name=label,
            label=label,
            cluster_moid=cluster_of[label],
            cluster_name=cluster_of[label],
            datacenter="DC0",
            connection_state="connected",
            in_maintenance_mode=False,
            vcenter=SETTINGS.vcenter,
        )
        for label in labels
    }
    placements = {
        node: NodePlacement(
            node=node,
            vm_moid=f"vm-{node}",
            bios_uuid="",
            instance_uuid="",
            host_moid=host,
            host_name=host,
            host_label=host,
            cluster_moid=cluster_of[host],
            cluster_name=cluster_of[host],
            datacenter="DC0",
            vcenter=SETTINGS.vcenter,
            observed_at="",
            version=1,
        )
        for node, host in placement.items()
    }
    return placements, hosts


class Ticker:
    """The longest gap between two turns of a task that only yields: the loop's longest
    synchronous stretch while it runs."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> "Ticker":
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def one_plan(
    index: ClusterIndex,
    placements: dict[str, NodePlacement],
    hosts: dict[str, EsxiHost],
    pods: list[Pod],
) -> tuple[Plan, float, float]:
    """One plan as the translator makes it: the loop runs between its steps."""
    with Ticker() as ticker:
        await asyncio.sleep(0)  # the ticker's first turn
        started = time.perf_counter()
        planning = Planning(index, placements, hosts, pods, SETTINGS)
        for _ in planning.steps():
            await asyncio.sleep(0)
        seconds = time.perf_counter() - started
        await asyncio.sleep(0)  # its turn after the plan
    return planning.result, seconds, ticker.longest


async def main(scale: float, clusters: int, runs: int) -> None:
    world = build_cluster(scale)
    placements, hosts = topology(world.placement, clusters)
    index = ClusterIndex()
    feed(world, index)
    required_host = sum(
        1 for w in world.workloads if w.required and w.topology_key == "hostaffinity.io/esxi-host"
    )
    print(
        f"scale: {len(index)} pods, {len(placements)} node VMs on {len(hosts)} hosts in "
        f"{clusters} clusters, {sum(1 for w in world.workloads if w.topology_key)} anti-affine "
        f"workloads ({required_host} required on the ESXi-host key); load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    # What the translator hands the plan: the pods whose spec it reads (all of them before).
    constrained = [pod for pod in world.pods if asks_for_placement(pod)]
    freeze_gc_after_initial_load()  # as the service does once its informers have synced
    timings, stretches = [], []
    for _ in range(runs):
        result, seconds, stretch = await one_plan(index, placements, hosts, constrained)
        timings.append(seconds)
        stretches.append(stretch)
    rules = sum(len(c.objects) for c in result.clusters.values())
    print(
        f"plan ({runs} runs): median {statistics.median(timings) * 1000:.0f} ms, "
        f"p99 {percentile(timings, 0.99) * 1000:.0f} ms; longest synchronous stretch "
        f"{max(stretches) * 1000:.0f} ms; {rules} rules and groups, "
        f"{len(result.conflicts)} conflicts, {len(result.untranslatable)} untranslatable"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}; peak RSS: {peak_rss_mib():.0f} MiB")


def _args() -> Any:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20)
    return parser.parse_args()


if __name__ == "__main__":
    args = _args()
    asyncio.run(main(args.scale, args.clusters, args.runs))
