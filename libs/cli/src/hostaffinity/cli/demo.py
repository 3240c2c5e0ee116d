"""`hostaffinity demo`: the product's scenarios played step by step on whatever `make dev`
started, each told from the event stream (what each service did and why) and ended by a check.

A step that needs kube-scheduler runs only where one holds its Lease; the others set their
starting state with pods bound by `nodeName`, as a drain leaves them, so they run on a cluster
with no scheduler too (the Kubernetes double the tests use). The demo writes to Kubernetes (its
namespace, node cordons) and vCenter (vMotions); it reads the bus as `cli` and never writes it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hostaffinity.cli.connections import kubernetes_settings, open_api
from hostaffinity.cli.demo_world import (
    EventTail,
    Kube,
    StepFailed,
    VCenter,
    following,
    host_of,
)
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.cli.seeding import vcenter_settings
from hostaffinity.runtime.kube.client import NODES
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    DrsRulesApplied,
    NodeLabelled,
    PodEvicted,
    TopologyEvent,
    VmMoved,
)

QUIET_SECONDS = 5.0  # after the expected evictions, how long no further one may come


class NotRun(Exception):
    """Why a step cannot run here."""


@dataclass
class Demo:
    kube: Kube
    vcenter: VCenter
    events: EventTail
    within: float

    async def hosts(self) -> dict[str, list[str]]:
        """ESXi host label value -> the Ready nodes on it, as the labels say now."""
        placed: dict[str, list[str]] = {}
        for node in await self.kube.nodes():
            host = host_of(node)
            if host is not None:
                placed.setdefault(host, []).append(node["metadata"]["name"])
        return {host: sorted(nodes) for host, nodes in sorted(placed.items())}

    def show(self, wanted: Callable[[TopologyEvent], bool]) -> None:
        self.events.show = wanted

    async def evictions(self, app: str, count: int) -> list[PodEvicted]:
        """Wait for `count` evictions of the app's pods, then QUIET_SECONDS for no more."""
        pods = {
            f"{self.kube.namespace}/{pod['metadata']['name']}"
            for pod in await self.kube.pods_of(app)
        }

        def evicted(events: list[TopologyEvent]) -> list[PodEvicted]:
            return [e for e in events if isinstance(e, PodEvicted) and e.pod in pods]

        await self.events.until(
            lambda seen: len(evicted(seen)) >= count,
            self.within,
            f"{count} eviction(s) of app={app}",
        )
        await asyncio.sleep(QUIET_SECONDS)
        return evicted(self.events.seen)


def pod(name: str, app: str, node: str, affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    """A replica of the ReplicaSet `app`, bound to `node` unless that is empty."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": "registry.k8s.io/pause:3.10",
             "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
        ],
        "terminationGracePeriodSeconds": 1,
    }  # fmt: skip
    if node:
        spec["nodeName"] = node
    if affinity:
        spec["affinity"] = affinity
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app, "uid": f"demo-{app}",
             "controller": True}  # fmt: skip
    metadata = {"name": name, "labels": {"app": app}, "ownerReferences": [owner]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def apart_on(key: str, app: str) -> dict[str, Any]:
    """Required anti-affinity of the app's replicas on the topology `key`."""
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


async def vmotion_relabels(demo: Demo) -> str:
    hosts = await demo.hosts()
    source = max(hosts, key=lambda host: len(hosts[host]))
    node = hosts[source][-1]
    target = min((h for h in hosts if h != source), key=lambda host: len(hosts[host]))
    demo.show(lambda e: isinstance(e, VmMoved | NodeLabelled) and e.node == node)
    print(f"   vCenter: VM {node} (node {node}) vMotioned from {source} to {target}")
    await demo.vcenter.vmotion(node, target)
    await demo.events.until(
        lambda seen: any(
            isinstance(e, VmMoved) and e.node == node and e.to_host_name == target for e in seen
        ),
        demo.within,
        f"vm.moved of node {node} to {target}",
    )
    deadline = time.monotonic() + demo.within
    while node not in (await demo.hosts()).get(target, []):
        if time.monotonic() > deadline:
            raise StepFailed(f"node {node} is not labelled {LABEL_ESXI_HOST}={target}")
        await asyncio.sleep(0.2)
    return f"node {node} is labelled {LABEL_ESXI_HOST}={target}"


async def webhook_spreads(demo: Demo) -> str:
    if not await demo.kube.has_live_scheduler():
        raise NotRun(
            "no kube-scheduler here (no Lease kube-system/kube-scheduler): the webhook's "
            "host terms take effect when a scheduler places the pods"
        )
    replicas = [
        pod(f"spread-{n}", "spread", "", apart_on("kubernetes.io/hostname", "spread"))
        for n in range(3)
    ]
    for manifest in replicas:
        manifest["metadata"]["annotations"] = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
        await demo.kube.create_pod(manifest)
    deadline = time.monotonic() + demo.within
    while True:
        placed = {
            p["metadata"]["name"]: p["spec"].get("nodeName")
            for p in await demo.kube.pods_of("spread")
        }
        if all(placed.values()):
            break
        if time.monotonic() > deadline:
            raise StepFailed(f"not every replica was scheduled: {placed}")
        await asyncio.sleep(0.5)
    on_host = {node: host for host, nodes in (await demo.hosts()).items() for node in nodes}
    used = {on_host.get(node or "") for node in placed.values()}
    if len(used) != len(placed):
        raise StepFailed(f"replicas share an ESXi host: {placed} (is the webhook registered?)")
    return f"3 replicas on 3 ESXi hosts: {', '.join(sorted(str(h) for h in used))}"


async def drs_rule_made(demo: Demo) -> str:
    hosts = await demo.hosts()
    nodes = [nodes[0] for nodes in list(hosts.values())[:3]]
    demo.show(lambda e: isinstance(e, DrsRulesApplied))
    for index, node in enumerate(nodes):
        await demo.kube.create_pod(pod(f"db-{index}", "db", node, apart_on(LABEL_ESXI_HOST, "db")))
    print(
        f"   Kubernetes: 3 replicas of db, required anti-affinity on {LABEL_ESXI_HOST},"
        f" on {', '.join(nodes)}"
    )
    await demo.events.until(
        lambda seen: any(isinstance(e, DrsRulesApplied) and e.added for e in seen),
        demo.within,
        "drs.rules.applied adding a rule",
    )
    rules = [name for name, vms in await demo.vcenter.anti_affinity_rules() if vms == set(nodes)]
    if not rules:
        raise StepFailed(f"vCenter has no anti-affinity rule over the VMs {', '.join(nodes)}")
    return f"vCenter keeps VMs {', '.join(nodes)} apart by DRS rule {rules[0]}"


async def drain_spreads(demo: Demo) -> str:
    hosts = await demo.hosts()
    drained, piled = hosts[next(iter(hosts))][0], hosts[list(hosts)[-1]][0]
    print(
        f"   Kubernetes: node {drained} drained, its 3 web replicas now all on {piled};"
        f" {drained} uncordoned"
    )
    demo.show(lambda e: isinstance(e, PodEvicted))
    await demo.kube.set_unschedulable(drained, True)
    for index in range(3):
        await demo.kube.create_pod(pod(f"web-{index}", "web", piled))
    await demo.kube.set_unschedulable(drained, False)
    evicted = await demo.evictions("web", 2)
    if len(evicted) != 2 or {e.strategy for e in evicted} != {"RemoveDuplicates"}:
        raise StepFailed(
            "expected 2 evictions by RemoveDuplicates, saw "
            f"{[(e.pod, e.strategy) for e in evicted]}"
        )
    return f"2 of the 3 replicas piled on {piled} evicted by RemoveDuplicates; 1 stays"


async def shared_host_evicts_one(demo: Demo) -> str:
    hosts = await demo.hosts()
    (first, second, *_rest) = hosts
    nodes = [hosts[first][0], hosts[second][0]]
    for index, node in enumerate(nodes):
        await demo.kube.create_pod(
            pod(f"api-{index}", "api", node, apart_on(LABEL_ESXI_HOST, "api"))
        )
    print(
        f"   Kubernetes: 2 replicas of api, required anti-affinity on {LABEL_ESXI_HOST},"
        f" on {nodes[0]} ({first}) and {nodes[1]} ({second})"
    )
    await asyncio.sleep(QUIET_SECONDS)  # the descheduler sees them apart first
    demo.show(
        lambda e: isinstance(e, PodEvicted) or (isinstance(e, VmMoved) and e.node == nodes[1])
    )
    print(f"   vCenter: VM {nodes[1]} vMotioned onto {first}, next to {nodes[0]}")
    await demo.vcenter.vmotion(nodes[1], first)
    evicted = await demo.evictions("api", 1)
    if len(evicted) != 1:
        raise StepFailed(f"expected exactly 1 eviction, saw {[e.pod for e in evicted]}")
    return f"exactly one replica evicted ({evicted[0].pod}, {evicted[0].strategy})"


@dataclass(frozen=True)
class Step:
    title: str
    run: Callable[[Demo], Awaitable[str]]


STEPS = (
    Step("a vMotion relabels the node", vmotion_relabels),
    Step("three anti-affine replicas land on three ESXi hosts (webhook)", webhook_spreads),
    Step("their DRS rule keeps the VMs apart", drs_rule_made),
    Step("drain + uncordon: the descheduler spreads the piled replicas", drain_spreads),
    Step("a VM moved onto a shared host: exactly one eviction", shared_host_evicts_one),
)


async def play(demo: Demo) -> dict[str, int]:
    """Every step in order, each from a clean namespace; counts of passed, failed, not run."""
    counts = {"passed": 0, "failed": 0, "not run": 0}
    for number, step in enumerate(STEPS, 1):
        print(f"\n{number}. {step.title}", flush=True)
        await demo.kube.delete_demo_pods()
        started = time.monotonic()
        try:
            said = await step.run(demo)
        except NotRun as why:
            counts["not run"] += 1
            print(f"   not run: {why}")
        except StepFailed as wrong:
            counts["failed"] += 1
            print(f"   check FAILED: {wrong}")
        else:
            counts["passed"] += 1
            print(f"   check passed: {said} ({time.monotonic() - started:.1f} s)")
        demo.show(lambda _event: False)
    await demo.kube.delete_demo_pods()
    return counts


async def run_demo(args: argparse.Namespace) -> int:
    settings = kubernetes_settings(args.kubeconfig, args.context)
    # Kubernetes and the bus first: each says at once, in one line, when it is not there.
    async with (
        open_api(settings, probe=NODES) as client,
        following(nats_settings(args)) as events,
    ):
        kube = Kube(client, args.namespace)
        vcenter = await VCenter.connect(vcenter_settings(args.vcenter))
        await kube.ensure_namespace()
        demo = Demo(kube, vcenter, events, args.timeout)
        hosts = await demo.hosts()
        placed = sum(len(nodes) for nodes in hosts.values())
        print(
            f"hostaffinity demo: {placed} nodes on {len(hosts)} ESXi hosts,"
            f" namespace {args.namespace}"
        )
        if len(hosts) < 3:
            raise RuntimeError(
                "the demo needs nodes placed on 3 ESXi hosts: is `make dev` running?"
            )
        counts = await play(demo)
    print(
        f"\ndemo: {counts['passed']} steps passed, {counts['failed']} failed,"
        f" {counts['not run']} not run"
    )
    return 1 if counts["failed"] else 0


def add_demo_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser("demo", help="play the scenarios on what `make dev` started")
    demo.add_argument("--kubeconfig", help="default: KUBECONFIG, ~/.kube/config")
    demo.add_argument("--context", help="default: the kubeconfig's current-context")
    demo.add_argument(
        "--vcenter",
        default="http://user:pass@127.0.0.1:8989/sdk",
        help="the vCenter (make dev's vcsim)",
    )
    demo.add_argument("--namespace", default="hostaffinity-demo", help="where the demo's pods go")
    demo.add_argument("--timeout", type=float, default=60.0, help="seconds each check may wait")
    add_nats_options(demo)
    demo.set_defaults(run=run_demo)
