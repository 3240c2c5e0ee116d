"""The operator commands at 5,000 nodes / 150,000 pods, answered from a warm read.

"Warm read": the snapshot (API objects, topology KV, DRS records) is already in memory, as after
the command's reads; each run then does what the command does after reading: build the engine's
index (exposure, what-if), compute the report, render both the table and the JSON. The decode
of the raw API JSON (the pod list's pages, as the API server sends them) is timed apart, and
last the descheduler's exposure gauge recount over a built index (what a scrape costs).
The cluster comes from bench/cluster.py; every pod gets a ReplicaSet owner (its workload) and
requests, every node allocatable, every host a record in the KV.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import msgspec
from cluster import build_cluster
from figures import peak_rss_mib, percentile

from hostaffinity.affinity.exposure import exposed_per_namespace
from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.model import OwnerReference, Pod
from hostaffinity.cli.exposure import exposure_report, render_exposure
from hostaffinity.cli.maintenance import maintenance_report, render_maintenance
from hostaffinity.cli.reading import _pod_with_requests
from hostaffinity.cli.snapshot import ClusterSnapshot, EngineOptions, build_engine
from hostaffinity.cli.topology import render_topology, topology_report
from hostaffinity.schema import EsxiHost, NodePlacement

REQUEST = {"cpu": 100, "memory": 128 * 2**20 * 1000}
ALLOCATABLE = {"cpu": 16_000, "memory": 64 * 2**30 * 1000, "pods": 110_000}


def _owned(pod: Pod) -> Pod:
    app = pod.metadata.labels["app"]
    owner = OwnerReference(kind="ReplicaSet", name=f"{app}-5d8f7", uid=app, controller=True)
    labels = {**pod.metadata.labels, "pod-template-hash": "5d8f7"}
    metadata = msgspec.structs.replace(pod.metadata, owner_references=[owner], labels=labels)
    return msgspec.structs.replace(pod, metadata=metadata)


def build_snapshot(scale: float, seed: int) -> ClusterSnapshot:
    cluster = build_cluster(scale, seed)
    snapshot = ClusterSnapshot()
    snapshot.nodes = {n.metadata.name: n for n in cluster.nodes}
    snapshot.namespaces = {n.metadata.name: n for n in cluster.namespaces}
    snapshot.pods = {pod.key: pod for pod in map(_owned, cluster.pods)}
    snapshot.requests = dict.fromkeys(snapshot.pods, REQUEST)
    snapshot.allocatable = dict.fromkeys(snapshot.nodes, ALLOCATABLE)
    for node, host in cluster.placement.items():
        snapshot.placements[node] = NodePlacement(
            node=node, vm_moid=f"vm-{node}", bios_uuid="", instance_uuid="",
            host_moid=f"host-{host}", host_name=f"{host}.example.com", host_label=host,
            cluster_moid=f"domain-c{hash(host) % 5}", cluster_name=f"C{hash(host) % 5}",
            datacenter="DC0", vcenter="vc", observed_at="2026-11-22T08:00:00Z", version=1,
        )  # fmt: skip
    for placement in snapshot.placements.values():
        snapshot.hosts[placement.host_moid] = EsxiHost(
            moid=placement.host_moid, name=placement.host_name, label=placement.host_label,
            cluster_moid=placement.cluster_moid, cluster_name=placement.cluster_name,
            datacenter="DC0", connection_state="connected", in_maintenance_mode=False,
        )  # fmt: skip
    return snapshot


def timed(runs: int, answer: Callable[[], str]) -> tuple[list[float], str]:
    samples, summary = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        summary = answer()
        samples.append(time.perf_counter() - start)
    return samples, summary


def report(label: str, samples: list[float], summary: str) -> None:
    print(
        f"  {label:<32} median {statistics.median(samples):6.2f} s   "
        f"p99 {percentile(samples, 0.99):6.2f} s   ({summary})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 5,000 nodes / 150k pods")
    parser.add_argument("--runs", type=int, default=5, help="answers timed per command")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    snapshot = build_snapshot(args.scale, args.seed)
    freeze_gc_after_initial_load()  # as the command does once its reads are done
    hosts = sorted({p.host_label for p in snapshot.placements.values()})
    print(
        f"scale {args.scale}: {len(snapshot.nodes)} nodes, {len(hosts)} ESXi hosts, "
        f"{len(snapshot.pods)} pods, {args.runs} runs per command"
    )
    options = EngineOptions()

    pages = [
        msgspec.json.encode({"items": list(snapshot.pods.values())[i : i + 500]})
        for i in range(0, len(snapshot.pods), 500)
    ]
    item_list = msgspec.json.Decoder(dict[str, list[msgspec.Raw]])
    start = time.perf_counter()
    decoded = sum(
        len([_pod_with_requests(bytes(raw)) for raw in item_list.decode(page)["items"]])
        for page in pages
    )
    seconds = time.perf_counter() - start
    print(f"decode of the pod list's raw JSON: {decoded} pods in {seconds:.2f} s (not in answers)")

    def topology() -> str:
        result = topology_report(snapshot)
        render_topology(result)
        msgspec.json.encode(result)
        return f"{len(result.datacenters[0].clusters)} clusters"

    def exposure() -> str:
        result = exposure_report(snapshot, build_engine(snapshot, options).index)
        render_exposure(result)
        msgspec.json.encode(result)
        required = sum(w.coverage == "required" for w in result.workloads)
        return f"{len(result.workloads)} exposed workloads, {required} with a required rule"

    def what_if() -> str:
        engine = build_engine(snapshot, options)
        result = maintenance_report(snapshot, engine, [hosts[0]])
        render_maintenance(result)
        msgspec.json.encode(result)
        stuck = sum(m.verdict != "moves" for m in result.moves)
        return f"{len(result.nodes)} nodes, {len(result.moves)} pods to move, {stuck} stuck"

    print("answers from the warm snapshot (index build where used + report + table + JSON):")
    for label, answer in (
        ("topology", topology),
        ("exposure", exposure),
        ("what-if maintenance (1 host)", what_if),
    ):
        report(label, *timed(args.runs, answer))
    index = build_engine(snapshot, options).index
    samples, summary = timed(
        args.runs, lambda: f"{sum(exposed_per_namespace(index).values())} exposed"
    )
    print("the descheduler's exposure gauge recount over a built index (no index build):")
    report("hostaffinity_workloads_exposed", samples, summary)
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
