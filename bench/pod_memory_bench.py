"""What an informer's cache of decoded pods costs: the drs-translator's, the extender's and the
webhook's pod watches each hold every pod of the cluster as `affinity.model.decode_pod` made it.

    uv run --frozen python bench/pod_memory_bench.py [--pods 150000] [--replicas 10]

The pods are a Deployment's as kube-apiserver serves them: per workload one ReplicaSet's labels
(`pod-template-hash`), ownerReference and annotations; the two NoExecute tolerations the
DefaultTolerationSeconds admission plugin gives every pod; required anti-affinity on the ESXi-host
key for 40% of the workloads; one container. Each pod's JSON is decoded once, as an informer
decodes its list, and the decoded pods are kept. Prints the memory they hold (tracemalloc) and the
decode time per pod (best of three runs, tracemalloc off), for `decode_pod` and for a plain decode
of the same type (what each replica would hold without sharing).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec

from hostaffinity.affinity.model import Pod, decode_pod
from hostaffinity.schema import LABEL_ESXI_HOST

NODES = 5_000
TOLERATIONS = [
    {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300}
    for taint in ("not-ready", "unreachable")
]  # fmt: skip


def workload_pods(workload: int, replicas: int, rng: random.Random) -> list[bytes]:
    """One Deployment's replicas as API JSON."""
    app, template = f"app-{workload}", f"{rng.getrandbits(32):08x}"
    labels = {"app": app, "pod-template-hash": template, "team": f"team-{workload % 10}"}
    metadata: dict[str, Any] = {
        "namespace": f"ns-{workload % 100:03d}",
        "labels": labels,
        "annotations": {"prometheus.io/scrape": "true", "kubectl.kubernetes.io/restartedAt": "x"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{template}",
             "uid": f"rs-{workload}", "controller": True, "blockOwnerDeletion": True},
        ],
    }  # fmt: skip
    spec: dict[str, Any] = {"tolerations": TOLERATIONS, "containers": [{"name": "app"}]}
    if workload % 5 < 2:
        term = {"topologyKey": LABEL_ESXI_HOST, "labelSelector": {"matchLabels": {"app": app}}}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    return [
        msgspec.json.encode(
            {
                "metadata": metadata | {"name": f"{app}-{template}-{r}", "uid": f"{workload}-{r}"},
                "spec": spec | {"nodeName": f"node-{rng.randrange(NODES)}"},
                "status": {"phase": "Running"},
            }
        )
        for r in range(replicas)
    ]


def held_mib(decode: Callable[[bytes], Pod], raws: list[bytes]) -> float:
    gc.collect()
    tracemalloc.start()
    kept = [decode(raw) for raw in raws]
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return held / 2**20


def decode_microseconds(decode: Callable[[bytes], Pod], raws: list[bytes]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        kept = [decode(raw) for raw in raws]
        best = min(best, time.perf_counter() - started)
        del kept
    return best / len(raws) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--replicas", type=int, default=10)
    args = parser.parse_args()
    rng = random.Random(1)
    raws = [
        raw
        for workload in range(max(1, args.pods // args.replicas))
        for raw in workload_pods(workload, args.replicas, rng)
    ]
    print(f"{len(raws):,} pods in workloads of {args.replicas}, {sum(map(len, raws)) / 2**20:.0f}"
          " MiB of JSON")  # fmt: skip
    plain = msgspec.json.Decoder(Pod).decode
    for name, decode in (("decode_pod (shared)", decode_pod), ("plain decode", plain)):
        held = held_mib(decode, raws)
        print(f"{name}: {held:.1f} MiB held, {decode_microseconds(decode, raws):.1f} µs per pod")


if __name__ == "__main__":
    main()
