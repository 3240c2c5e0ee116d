"""drs-translator at scale: 10,000 pods in 1,000 anti-affinity groups over 500 node VMs.

vcsim runs 5 clusters of 20 hosts with 500 VMs; each group of 10 replicas sits on 10 VMs of one
cluster. Prints the planner's time from scratch (median and p99 of several runs, index build
included), the vCenter calls of the first apply (one reconfigure per cluster expected), then
moves one pod to another VM and prints the planner time, the calls and the rule edits that
follow, and the peak RSS of this process (nats-server and vcsim run apart).

    uv run --frozen python bench/drs_bench.py [--groups 1000] [--replicas 10] [--vms 500]
"""

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
from figures import peak_rss_mib, percentile
from pyVmomi import vim

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.core.plan import Plan, PlannerSettings
from hostaffinity.drs_translator.core.planner import plan
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import (
    DRS_BUCKET,
    LABEL_ESXI_HOST,
    DrsRulesApplied,
    EsxiHost,
    Event,
    EventFactory,
    NodePlacement,
)
from tests.platform.nats import NatsServer
from tests.platform.vcsim import build_vcsim, start_vcsim

CLUSTERS, HOSTS_PER_CLUSTER = 5, 20
SETTINGS = PlannerSettings(vcenter="bench", install="bench")


def inventory(si: vim.ServiceInstance) -> tuple[dict[str, NodePlacement], dict[str, EsxiHost]]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
    placements, hosts = {}, {}
    for host in view.view:
        cluster = host.parent._moId
        hosts[host._moId] = EsxiHost(
            moid=host._moId,
            name=host.name,
            label=host.name,
            cluster_moid=cluster,
            cluster_name=host.parent.name,
            datacenter="DC0",
            connection_state="connected",
            in_maintenance_mode=False,
        )
        for vm in host.vm:
            placements[vm.name] = NodePlacement(
                node=vm.name,
                vm_moid=vm._moId,
                bios_uuid="",
                instance_uuid="",
                host_moid=host._moId,
                host_name=host.name,
                host_label=host.name,
                cluster_moid=cluster,
                cluster_name=host.parent.name,
                datacenter="DC0",
                vcenter="bench",
                observed_at="",
                version=1,
            )
    return placements, hosts


def replica(group: int, index: int, node: str) -> Pod:
    labels = {"app": f"app-{group}"}
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": LABEL_ESXI_HOST}
    return msgspec.convert(
        {
            "metadata": {"name": f"app-{group}-{index}", "namespace": "default", "labels": labels},
            "spec": {
                "nodeName": node,
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
                },
            },
        },
        Pod,
    )


def workload(groups: int, replicas: int, placements: dict[str, NodePlacement]) -> list[Pod]:
    """Each group on `replicas` distinct VMs of one cluster, picked at random (seeded)."""
    by_cluster: dict[str, list[str]] = {}
    for node, p in sorted(placements.items()):
        by_cluster.setdefault(p.cluster_moid, []).append(node)
    clusters = sorted(by_cluster)
    pods = []
    for g in range(groups):
        nodes = by_cluster[clusters[g % len(clusters)]]
        chosen = random.Random(g).sample(nodes, replicas)
        pods += [replica(g, i, node) for i, node in enumerate(chosen)]
    return pods


def plan_from_scratch(
    pods: list[Pod], placements: dict[str, NodePlacement], hosts: dict[str, EsxiHost]
) -> tuple[Plan, float]:
    started = time.perf_counter()
    index = ClusterIndex()
    index.set_namespace("default", {})
    for pod in pods:
        index.upsert_pod(pod)
    result = plan(index, placements, hosts, pods, SETTINGS)
    return result, time.perf_counter() - started


async def main(groups: int, replicas: int, vms: int, runs: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="drs-bench-"))
    vc = start_vcsim(
        build_vcsim(),
        workdir,
        [
            "-listen=127.0.0.1:0",
            "-login=user:pass",
            f"-clusters={CLUSTERS}",
            f"-hosts={HOSTS_PER_CLUSTER}",
            f"-vms={vms}",
        ],
        120,
    )
    nats = NatsServer(workdir)
    await nats.start()
    bus = await Bus.connect(nats.settings(), name="drs-bench")
    try:
        placements, hosts = inventory(vc.connect())
        pods = workload(groups, replicas, placements)
        print(
            f"scale: {len(pods)} pods in {groups} anti-affinity groups of {replicas}, "
            f"{len(placements)} VMs, {len(hosts)} hosts in {CLUSTERS} clusters"
        )
        timings = []
        for _ in range(runs):
            desired, seconds = plan_from_scratch(pods, placements, hosts)
            timings.append(seconds)
        rules = sum(len(c.objects) for c in desired.clusters.values())
        print(
            f"plan from scratch ({runs} runs): median {statistics.median(timings):.3f} s, "
            f"p99 {percentile(timings, 0.99):.3f} s; {rules} rules, "
            f"{len(desired.conflicts)} conflicts"
        )

        await bus.provision()
        drs_bucket = await bus.js.key_value(DRS_BUCKET)
        records = OwnershipRecords(drs_bucket, "bench", "bench")
        kept = KeptAnnouncements(drs_bucket, "bench")
        events: list[Event] = []

        async with VCenterSession(vc.settings()) as session:
            config = ClusterRules(session)
            applier = DrsApplier(
                config,
                records,
                kept,
                events.append,
                DrsMetrics(),
                vcenter="bench",
                install="bench",
                event_factory=EventFactory("drs-translator"),
            )
            started = time.perf_counter()
            for cluster_plan in desired.clusters.values():
                await applier.apply(cluster_plan)
            print(
                f"first apply: {time.perf_counter() - started:.2f} s, vCenter calls "
                f"{dict(config.calls)} for {len(desired.clusters)} clusters"
            )

            moved = pods[0]
            group_nodes = {p.spec.node_name for p in pods[:replicas]}
            cluster = placements[moved.spec.node_name].cluster_moid
            target = next(
                n
                for n, p in sorted(placements.items())
                if p.cluster_moid == cluster and n not in group_nodes
            )
            pods[0] = msgspec.structs.replace(
                moved, spec=msgspec.structs.replace(moved.spec, node_name=target)
            )
            desired, seconds = plan_from_scratch(pods, placements, hosts)
            before, events_before = Counter(config.calls), len(events)
            for cluster_plan in desired.clusters.values():
                await applier.apply(cluster_plan)
            calls = {k: v - before[k] for k, v in config.calls.items() if v - before[k]}
            applied = [e for e in events[events_before:] if isinstance(e, DrsRulesApplied)]
            edits = [(len(e.added), len(e.edited), len(e.removed)) for e in applied]
            print(
                f"one pod moved: plan {seconds:.3f} s, vCenter calls {calls}, "
                f"(added, edited, removed) per reconfigure {edits}"
            )
        print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    finally:
        await bus.close()
        await nats.stop()
        vc.stop()


def _args() -> Any:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--vms", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    return parser.parse_args()


if __name__ == "__main__":
    args = _args()
    asyncio.run(main(args.groups, args.replicas, args.vms, args.runs))
