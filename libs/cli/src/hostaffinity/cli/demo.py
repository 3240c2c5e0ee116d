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
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from hostaffinity.cli.cluster_check import serves_kubevirt
from hostaffinity.cli.connections import kubernetes_settings, open_api
from hostaffinity.cli.demo_world import (
    EventTail,
    Kube,
    NotRun,
    StepFailed,
    VCenter,
    following,
    host_of,
)
from hostaffinity.cli.nats_options import add_nats_options, nats_settings
from hostaffinity.cli.seeding import vcenter_settings
from hostaffinity.runtime.kube.client import NODES, ResourceRef
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    DrsRulesApplied,
    NodeLabelled,
    PodEvicted,
    TopologyEvent,
    VmiMigrationRequested,
    VmMoved,
)

POLL_SECONDS = 0.2  # how often a step asks again for the state it waits for
QUIET_SECONDS = 5.0  # after the expected evictions, how long no further one may come
KUBEVIRT_CRS: Final = ResourceRef("kubevirt.io", "v1", "kubevirts")
_T = TypeVar("_T")


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

    async def eventually(
        self, probe: Callable[[], Awaitable[_T | None]], failure: Callable[[], str]
    ) -> _T:
        """`probe()`'s first answer that is not None, asked every POLL_SECONDS; StepFailed with
        `failure()` when none came within `within` s. What the services do is asynchronous:
        a step waits for the state it shows, not for a fixed time."""
        deadline = time.monotonic() + self.within
        while (found := await probe()) is None:
            if time.monotonic() > deadline:
                raise StepFailed(failure())
            await asyncio.sleep(POLL_SECONDS)
        return found

    async def evictions(self, app: str, count: int) -> list[PodEvicted]:
        """Wait for `count` evictions of the app's pods, then QUIET_SECONDS for no more."""
        pods = {
            f"{self.kube.namespace}/{pod['metadata']['name']}"
            for pod in await self.kube.pods_of(app)
        }

        def evicted(events: list[TopologyEvent]) -> list[PodEvicted]:
            return [
                e
                for e in events
                if isinstance(e, PodEvicted) and e.pod in pods and e.result == "evicted"
            ]

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

    async def relabelled() -> bool | None:
        return True if node in (await demo.hosts()).get(target, []) else None

    await demo.eventually(
        relabelled, lambda: f"node {node} is not labelled {LABEL_ESXI_HOST}={target}"
    )
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
    placed: dict[str, str | None] = {}

    async def all_scheduled() -> bool | None:
        placed.update(
            (p["metadata"]["name"], p["spec"].get("nodeName"))
            for p in await demo.kube.pods_of("spread")
        )
        return True if all(placed.values()) else None

    await demo.eventually(all_scheduled, lambda: f"not every replica was scheduled: {placed}")
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

    async def rule_over_all() -> str | None:
        # The first rule may be made before the last replica is seen; it grows to all three.
        rules = await demo.vcenter.anti_affinity_rules()
        return next((name for name, vms in rules if vms == set(nodes)), None)

    rule = await demo.eventually(
        rule_over_all, lambda: f"vCenter has no anti-affinity rule over the VMs {', '.join(nodes)}"
    )
    return f"vCenter keeps VMs {', '.join(nodes)} apart by DRS rule {rule}"


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


# -- KubeVirt ----------------------------------------------------------------------------------
# KubeVirt's part (virt-controller rendering each VMI's virt-launcher pod, bound to its node) is
# played by the demo, where the cluster serves KubeVirt's API and no KubeVirt runs to do it.

VMIRS: Final = "VirtualMachineInstanceReplicaSet"
# The descheduler's `Migrating` Event on a VMI names the node it checked for the VM.
CHECKED_NODE: Final = re.compile(r"target node (\S+) \(addedNodeSelector\)|node (\S+) was checked")


async def kubevirt_here(demo: Demo) -> None:
    """NotRun unless the KubeVirt steps can run: KubeVirt's API served, its controllers absent."""
    if not await serves_kubevirt(demo.kube.client):
        raise NotRun("the cluster serves no KubeVirt API (KubeVirt is not installed)")
    if (await demo.kube.get(KUBEVIRT_CRS.path()))["items"]:
        raise NotRun(
            "KubeVirt runs here: its controllers would start the demo's VMIs themselves (the "
            "demo plays their part where the KubeVirt API is served without them)"
        )


async def kubevirt_hosts(demo: Demo) -> tuple[dict[str, list[str]], str]:
    """kubevirt_here, then the nodes per ESXi host and the first host with two node VMs."""
    await kubevirt_here(demo)
    hosts = await demo.hosts()
    return hosts, next(host for host in hosts if len(hosts[host]) >= 2)


def vmi(
    name: str,
    app: str,
    node: str,
    *,
    affinity: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running VMI of the VirtualMachineInstanceReplicaSet `app` on `node`, moved by live
    migration (evictionStrategy LiveMigrate)."""
    spec: dict[str, Any] = {
        "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}},
        "evictionStrategy": "LiveMigrate",
    }
    for key, value in (
        ("affinity", affinity),
        ("nodeSelector", node_selector),
        ("tolerations", tolerations),
    ):
        if value:
            spec[key] = value
    owner = {"apiVersion": "kubevirt.io/v1", "kind": VMIRS, "name": app, "uid": f"demo-{app}",
             "controller": True}  # fmt: skip
    metadata = {"name": name, "labels": {"app": app}, "annotations": annotations or {},
                "ownerReferences": [owner]}  # fmt: skip
    status = {"phase": "Running", "nodeName": node,
              "conditions": [{"type": "LiveMigratable", "status": "True"}]}  # fmt: skip
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": metadata, "spec": spec, "status": status}  # fmt: skip


def launcher_pod(created: dict[str, Any]) -> dict[str, Any]:
    """The virt-launcher pod virt-controller renders for a VMI: its labels (and KubeVirt's),
    annotations, affinity, nodeSelector and tolerations, bound to the VMI's node."""
    meta, spec = created["metadata"], created["spec"]
    labels = {**meta.get("labels", {}), "kubevirt.io": "virt-launcher",
              "kubevirt.io/created-by": meta["uid"]}  # fmt: skip
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
             "name": meta["name"], "uid": meta["uid"], "controller": True,
             "blockOwnerDeletion": True}  # fmt: skip
    manifest = pod(f"virt-launcher-{meta['name']}", "", created["status"]["nodeName"])
    manifest["metadata"] = {"name": manifest["metadata"]["name"], "labels": labels,
                            "annotations": meta.get("annotations", {}),
                            "ownerReferences": [owner]}  # fmt: skip
    for key in ("affinity", "nodeSelector", "tolerations"):
        if key in spec:
            manifest["spec"][key] = spec[key]
    return manifest


async def run_vms(demo: Demo, manifests: list[dict[str, Any]]) -> None:
    """Create the VMIs and their virt-launcher pods."""
    for manifest in manifests:
        await demo.kube.create_pod(launcher_pod(await demo.kube.create_vmi(manifest)))


async def migrations_requested(demo: Demo, app: str, count: int) -> list[VmiMigrationRequested]:
    """Wait for `count` live migrations of the app's VMs, then QUIET_SECONDS for no more; more
    of them, or a VM of the app evicted (restarted) instead, fails the step."""
    prefix = f"{demo.kube.namespace}/{app}-"

    def requested(events: list[TopologyEvent]) -> list[VmiMigrationRequested]:
        return [
            e
            for e in events
            if isinstance(e, VmiMigrationRequested)
            and e.vmi.startswith(prefix)
            and e.result == "migrated"
        ]

    await demo.events.until(
        lambda seen: len(requested(seen)) >= count,
        demo.within,
        f"{count} live migration(s) of the {app} VMs",
    )
    await asyncio.sleep(QUIET_SECONDS)
    evicted = [
        e.pod
        for e in demo.events.seen
        if isinstance(e, PodEvicted) and app in e.pod and e.result == "evicted"
    ]
    if evicted:
        raise StepFailed(f"VMs restarted by eviction instead of migrated: {evicted}")
    moved = requested(demo.events.seen)
    if len(moved) != count:
        raise StepFailed(f"expected {count} live migration(s), saw {[e.vmi for e in moved]}")
    return moved


async def checked_targets(demo: Demo, moved: list[VmiMigrationRequested]) -> dict[str, str]:
    """VMI name -> the node the descheduler checked for it (its `Migrating` Event)."""
    messages = await demo.kube.event_messages("VirtualMachineInstance", "Migrating")
    targets = {}
    for event in moved:
        name = event.vmi.split("/", 1)[1]
        found = CHECKED_NODE.search(messages.get(name, ""))
        if found is None:
            raise StepFailed(f"no Migrating Event naming the target of VMI {event.vmi}")
        targets[name] = found.group(1) or found.group(2)
    return targets


async def vm_replicas_migrate_apart(demo: Demo) -> str:
    await kubevirt_here(demo)
    hosts = await demo.hosts()
    piled = hosts[list(hosts)[-1]][0]
    print(f"   Kubernetes: a drain left the 3 VMs of {VMIRS} vm-web all on {piled}")
    demo.show(lambda e: isinstance(e, VmiMigrationRequested | PodEvicted))
    await run_vms(demo, [vmi(f"vm-web-{index}", "vm-web", piled) for index in range(3)])
    moved = await migrations_requested(demo, "vm-web", 2)
    if {e.strategy for e in moved} != {"RemoveDuplicates"}:
        raise StepFailed(f"expected migrations by RemoveDuplicates, saw {moved}")
    objects = {m["spec"]["vmiName"] for m in await demo.kube.migrations()}
    names = sorted(e.vmi.split("/", 1)[1] for e in moved)
    if not set(names) <= objects:
        raise StepFailed(f"no VirtualMachineInstanceMigration for {names} (have {objects})")
    return f"2 of the 3 VMs piled on {piled} live-migrate ({', '.join(names)}); none restarted"


async def anti_affine_vms_across_a_vmotion(demo: Demo) -> str:
    hosts, shared = await kubevirt_hosts(demo)
    first = next(host for host in hosts if host != shared)
    nodes = [hosts[first][0], hosts[shared][0]]
    apart = apart_on("kubernetes.io/hostname", "vm-db")
    opted_in = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
    await run_vms(demo, [
        vmi(f"vm-db-{index}", "vm-db", node, affinity=apart, annotations=opted_in)
        for index, node in enumerate(nodes)
    ])  # fmt: skip
    print(
        f"   Kubernetes: 2 VMs of vm-db, hostname anti-affinity read on the ESXi host (opt-in),"
        f" on {nodes[0]} ({first}) and {nodes[1]} ({shared})"
    )
    await asyncio.sleep(QUIET_SECONDS)  # the descheduler sees them apart first
    demo.show(
        lambda e: isinstance(e, VmiMigrationRequested | PodEvicted)
        or (isinstance(e, VmMoved) and e.node == nodes[1])
    )
    print(f"   vCenter: VM {nodes[1]} vMotioned onto {first}, next to {nodes[0]}")
    await demo.vcenter.vmotion(nodes[1], first)
    moved = await migrations_requested(demo, "vm-db", 1)
    ((name, target),) = (await checked_targets(demo, moved)).items()
    on_host = {node: host for host, members in (await demo.hosts()).items() for node in members}
    if on_host.get(target) == first:
        raise StepFailed(f"VM {name} would migrate to {target}, on {first} with the other VM")
    return f"VM {name} live-migrates to {target} ({on_host.get(target)}), off the shared host"


async def vm_node_selector_and_tolerations(demo: Demo) -> str:
    hosts, host = await kubevirt_hosts(demo)
    piled, others = hosts[host][0], hosts[host][1:]
    taint = {"key": "demo.hostaffinity.io/vms", "value": "only", "effect": "NoSchedule"}
    tolerate = {**taint, "operator": "Equal"}
    before = {n["metadata"]["name"]: n["spec"].get("taints", []) for n in await demo.kube.nodes()}
    print(
        f"   Kubernetes: 2 VMs of vm-edge (nodeSelector {LABEL_ESXI_HOST}={host}, tolerating"
        f" {taint['key']}) piled on {piled}; {', '.join(others)} tainted {taint['key']}"
    )
    demo.show(lambda e: isinstance(e, VmiMigrationRequested | PodEvicted))
    try:
        for node in others:
            await demo.kube.set_taints(node, [*before[node], taint])
        await run_vms(demo, [
            vmi(f"vm-edge-{index}", "vm-edge", piled, node_selector={LABEL_ESXI_HOST: host},
                tolerations=[tolerate])
            for index in range(2)
        ])  # fmt: skip
        moved = await migrations_requested(demo, "vm-edge", 1)
        targets = await checked_targets(demo, moved)
    finally:
        for node in others:
            await demo.kube.set_taints(node, before[node])
    if not set(targets.values()) <= set(others):
        raise StepFailed(f"expected a migration to one of {others}, saw {targets}")
    ((name, target),) = targets.items()
    return f"VM {name} live-migrates to {target}: on {host} as selected, its taint tolerated"


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
    Step("KubeVirt: VM replicas piled by a drain move apart live", vm_replicas_migrate_apart),
    Step(
        "KubeVirt: two anti-affine VMs kept on different ESXi hosts across a vMotion",
        anti_affine_vms_across_a_vmotion,
    ),
    Step(
        "KubeVirt: a VM's nodeSelector and tolerations honoured", vm_node_selector_and_tolerations
    ),
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
    vcenter_at = vcenter_settings(args.vcenter)  # a malformed --vcenter before anything is read
    # Kubernetes and the bus first: each says at once, in one line, when it is not there.
    async with (
        open_api(settings, probe=NODES) as client,
        following(nats_settings(args)) as events,
    ):
        kube = Kube(client, args.namespace)
        vcenter = await VCenter.connect(vcenter_at)
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
