"""What users, an admin and the cluster's own controllers do during a campaign.

The controllers are tests/e2e/descheduler_harness.py's stand-ins (kubelet, disruption
controller) with the ReplicaSet controller and a StatefulSet controller creating pods through
the API, so the admission webhook sees every one as kube-apiserver would send it, and a scheduler
that does what kube-scheduler with the extender wired does: the engine's kube-scheduler filters
over the node labels, then the scheduler-extender's filter and prioritize (ignorable: an error
skips it). The user creates, scales and deletes Deployments with host anti-affinity, written
either on the host key or as an opted-in hostname term the webhook twins (one in two with a
PodDisruptionBudget), creates, scales and rolls StatefulSets of opted-in pods, adds and removes
nodes, drains and uncordons; vMotions move node VMs within their cluster; an admin adds and edits
DRS rules of their own by hand. Every operation is in the history; one that failed (vcsim was
away) is recorded as failed and the campaign goes on. A soak's steady workload (STEADY_WEIGHTS)
makes every Deployment and StatefulSet at the start and only churns them after, so the number of
objects stays level over the hour.

Both installs' clusters are driven so: each runs a `kube-system/coredns` with host
anti-affinity, and each names its Deployments `web1`, `web2`, ... in `default`, so the same
workloads (namespace and name) run in both, as they do across an estate's clusters. The lean
install has no webhook and no extender: its Deployments are on the host key, it runs no
StatefulSets of opted-in pods, and its scheduler is kube-scheduler alone. A vMotion moves any
node VM, of either install; an admin's rule keeps any two VMs of a cluster apart.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from pyVmomi import vim

from hostaffinity.affinity.engine import AffinityEngine, FilterMode
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import decode_namespace, decode_node, decode_pod
from hostaffinity.schema import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.campaign.history import Clock, ExtenderFilter, Operation
from tests.campaign.install import Install
from tests.campaign.system import System
from tests.e2e.descheduler_harness import (
    Controllers,
    ReplicaSet,
    node_object,
    owned_by,
    pod_object,
    ready,
)
from tests.e2e.drs_harness import fields
from tests.e2e.harness import finished, inventory

NAMESPACE: Final = "default"
COREDNS: Final = "coredns"
COREDNS_NAMESPACE: Final = "kube-system"
# Never scaled nor deleted: a cluster's DNS. Three replicas kept apart on three hosts put two
# on one vSphere cluster of two, so each install holds a rule for it (the same digest as the
# other's where both are in one vSphere cluster).
COREDNS_REPLICAS: Final = 3
# Of each install's node VMs, all but SPARE_VMS are Nodes at the start, and at most MOST_SPARE
# are without a Node (the first install: 6 Nodes of 8 VMs at the start, at least 5).
SPARE_VMS: Final = 2
MOST_SPARE: Final = 3
MAX_DEPLOYMENTS: Final = 4  # besides coredns
MAX_STATEFULSETS: Final = 2
ADMIN_PREFIX: Final = "admin-rule-"
MIN_DEPLOYMENTS: Final = 2
MAX_CORDONED: Final = 2
HOSTNAME_KEY: Final = "kubernetes.io/hostname"
# A pod the scheduler could not place is tried again after this long (kube-scheduler's
# unschedulable queue, shortened).
RETRY_S: Final = 1.0
# The installs' share of the Kubernetes operations: the first (full) one, then the lean one.
INSTALL_WEIGHTS: Final = (2, 1)
STATEFULSET_KINDS: Final = ("statefulset-create", "statefulset-scale", "statefulset-roll")
WEIGHTS: Final = {
    "vmotion": 4,
    "admin-drs-rule": 1,
    "deployment-create": 2,
    "deployment-scale": 2,
    "deployment-delete": 1,
    "statefulset-create": 1,
    "statefulset-scale": 1,
    "statefulset-roll": 1,
    "node-add": 1,
    "node-remove": 1,
    "drain": 1,
    "uncordon": 2,
}
# The soak's steady workload: the same objects all along (every Deployment and StatefulSet
# made at the start, none created or deleted, no admin rule added), churned by scaling, rolls,
# vMotions, drains and nodes coming and going among the same VMs.
GROWING: Final = ("admin-drs-rule", "deployment-create", "deployment-delete", "statefulset-create")
STEADY_WEIGHTS: Final = {
    **{kind: w for kind, w in WEIGHTS.items() if kind not in GROWING},
    "deployment-roll": 1,
}


def anti_affinity(app: str, key: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _copy(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    copied: list[dict[str, Any]] = json.loads(json.dumps(objects))
    return copied


@dataclass
class StatefulSet:
    """A StatefulSet of opted-in pods `<name>-<ordinal>`, OrderedReady, rolled by revision."""

    name: str
    replicas: int
    revision: int = 1

    @property
    def revision_hash(self) -> str:
        return f"{self.name}-r{self.revision}"


class HostAwareControllers(Controllers):
    """The harness's controllers for one install's cluster, creating pods through its API and
    scheduling them as kube-scheduler with its extender (if it runs one) would (module
    docstring)."""

    def __init__(self, install: Install, clock: Clock) -> None:
        super().__init__(install.double, [])
        self.install = install
        self.history = install.history
        self.clock = clock
        self.statefulsets: list[StatefulSet] = []
        self.opted_in: set[str] = set()  # Deployments whose pods opt in (hostname terms)
        self._to_create: list[dict[str, Any]] = []
        self._retry_at: dict[str, float] = {}
        self._http: aiohttp.ClientSession | None = None
        self._pods: list[dict[str, Any]] = []
        self._pods_changed = -1

    async def run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            self._http = http
            while True:
                self.step()
                self._reconcile_statefulsets()
                await self._create_queued()
                await self._schedule_pending()
                await asyncio.sleep(self.period_s)

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every namespace's pods (coredns runs in kube-system), or one namespace's, as the
        double last changed them: read again only after a pod changed. The double copies each
        object it returns and a step asks a dozen times: copying them all at every ask, 20 times
        a second in each cluster, took a third of this process's time, where every service's
        API requests are answered (the first install's 2 s Leases lapsed on a loaded machine).
        Callers change a pod only on a copy (`terminate`)."""
        changed = self.install.double.latest.get("pods", 0)
        if changed != self._pods_changed:
            self._pods = self.kube.store.objects("pods", None)
            self._pods_changed = changed
        return [p for p in self._pods if namespace in (None, p["metadata"]["namespace"])]

    # -- creating pods (the ReplicaSet and StatefulSet controllers) ----------------------------

    def _reconcile(self, rs: ReplicaSet) -> None:
        active = [p for p in self.pods() if owned_by(p, rs.name) and not terminating(p)]
        for _ in range(rs.replicas - len(active)):
            pod = pod_object(
                "", rs.app, "", owner=rs.name, affinity=rs.affinity, namespace=rs.namespace
            )
            del pod["metadata"]["name"]
            pod["metadata"]["generateName"] = f"{rs.name}-"
            if rs.name in self.opted_in:
                pod["metadata"]["annotations"] = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
            self._to_create.append(pod)

    def _reconcile_statefulsets(self) -> None:
        for sts in self.statefulsets:
            pods = {p["metadata"]["name"]: p for p in self.pods() if owned_by(p, sts.name)}
            if any(terminating(p) for p in pods.values()):
                continue  # one pod at a time, as OrderedReady does
            extra = sorted(
                (
                    int(n.rsplit("-", 1)[1])
                    for n in pods
                    if int(n.rsplit("-", 1)[1]) >= sts.replicas
                ),
                reverse=True,
            )
            if extra:
                self.terminate(pods[f"{sts.name}-{extra[0]}"])
                continue
            missing = next((i for i in range(sts.replicas) if f"{sts.name}-{i}" not in pods), None)
            if missing is not None:
                if all(_ready(pods[f"{sts.name}-{i}"]) for i in range(missing)):
                    self._to_create.append(self._statefulset_pod(sts, missing))
                continue
            stale = [
                i
                for i in range(sts.replicas)
                if pods[f"{sts.name}-{i}"]["metadata"]["labels"].get("controller-revision-hash")
                != sts.revision_hash
            ]
            if stale and all(_ready(p) for p in pods.values()):
                self.terminate(pods[f"{sts.name}-{max(stale)}"])

    def _statefulset_pod(self, sts: StatefulSet, ordinal: int) -> dict[str, Any]:
        name = f"{sts.name}-{ordinal}"
        pod = pod_object(
            name, sts.name, "", owner=sts.name, affinity=anti_affinity(sts.name, HOSTNAME_KEY)
        )
        pod["metadata"]["labels"] |= {
            "controller-revision-hash": sts.revision_hash,
            "statefulset.kubernetes.io/pod-name": name,
        }
        pod["metadata"]["annotations"] = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
        pod["metadata"]["ownerReferences"][0] |= {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "uid": f"uid-{sts.name}",
        }
        return pod

    async def _create_queued(self) -> None:
        """POST each queued pod, as a controller does (through admission)."""
        assert self._http is not None
        queued, self._to_create = self._to_create, []
        headers = {"Authorization": f"Bearer {self.kube.token}"}
        for pod in queued:
            url = f"{self.kube.url}/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
            async with self._http.post(url, json=pod, headers=headers) as response:
                await response.read()  # a refusal (a name not yet free) is tried next step

    def terminate(self, pod: dict[str, Any]) -> None:
        terminating = _copy([pod])[0]
        terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.kube.write(terminating, manager="kube-controller-manager")

    # -- scheduling (kube-scheduler with the extender) -----------------------------------------

    def _schedule(self, now: float) -> None:
        """Scheduling is asynchronous here (`_schedule_pending`), since it calls the extender."""

    async def _schedule_pending(self) -> None:
        now = self.clock.now()
        for pod in self.pods():
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            if pod["spec"].get("nodeName") or terminating(pod):
                continue
            if self._retry_at.get(key, 0.0) > now:
                continue
            node = await self._place(pod)
            if node is None:
                self._retry_at[key] = now + RETRY_S
                continue
            self._retry_at.pop(key, None)
            bound = {
                **pod,
                "spec": {**pod["spec"], "nodeName": node},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            self.kube.write(bound, manager="kube-scheduler")

    async def _place(self, pod: dict[str, Any]) -> str | None:
        nodes = _copy(self.kube.store.objects("nodes", None))
        bound = _copy([p for p in self.pods() if p["spec"].get("nodeName") and not terminating(p)])
        index = ClusterIndex()
        for namespace in self.kube.store.objects("namespaces", None):
            index.upsert_namespace(decode_namespace(json.dumps(namespace)))
        for node in nodes:
            index.upsert_node(decode_node(json.dumps(node)))
        for other in bound:
            index.upsert_pod(decode_pod(json.dumps(other)))
        names = sorted(n["metadata"]["name"] for n in nodes)
        filtered = AffinityEngine(index).filter(
            decode_pod(json.dumps(pod)), names, mode=FilterMode.KUBE_SCHEDULER
        )
        feasible = filtered.feasible
        if not feasible:
            return None
        extender = self.install.extender_url()
        if extender is None:
            passed, scores = feasible, {}
        else:
            passed = await self._extender_filter(extender, pod, feasible, nodes, bound)
            if not passed:
                return None
            scores = await self._extender_prioritize(extender, pod, passed)
        load = {name: 0 for name in passed}
        for other in bound:
            if other["spec"]["nodeName"] in load:
                load[other["spec"]["nodeName"]] += 1
        return min(passed, key=lambda name: (-scores.get(name, 0), load[name], name))

    async def _extender_filter(
        self,
        extender: str,
        pod: dict[str, Any],
        feasible: list[str],
        nodes: list[dict[str, Any]],
        bound: list[dict[str, Any]],
    ) -> list[str]:
        """The extender's filter (nodeCacheCapable: names only); an error skips it."""
        assert self._http is not None
        passed: list[str] | None = None
        body = {"Pod": pod, "Nodes": None, "NodeNames": feasible}
        try:
            async with self._http.post(f"{extender}/filter", json=body) as r:
                answer = await r.json(content_type=None) if r.status == 200 else None
            if isinstance(answer, dict) and not answer.get("Error"):
                passed = list(answer.get("NodeNames") or [])
        except (aiohttp.ClientError, TimeoutError, ValueError):
            passed = None
        self.history.extender_filters.append(
            ExtenderFilter(
                self.clock.now(),
                _copy([pod])[0],
                tuple(feasible),
                None if passed is None else tuple(passed),
                nodes,
                bound,
            )
        )
        return feasible if passed is None else passed

    async def _extender_prioritize(
        self, extender: str, pod: dict[str, Any], names: list[str]
    ) -> dict[str, int]:
        assert self._http is not None
        body = {"Pod": pod, "Nodes": None, "NodeNames": names}
        try:
            async with self._http.post(f"{extender}/prioritize", json=body) as response:
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return {}  # only logged by kube-scheduler
        if not isinstance(answer, list):
            return {}
        return {entry["Host"]: int(entry["Score"]) for entry in answer}


def _ready(pod: dict[str, Any]) -> bool:
    return not terminating(pod) and ready(pod)


class Cluster:
    """One install's Kubernetes cluster as its users and controllers drive it."""

    def __init__(self, install: Install, clock: Clock) -> None:
        self.install = install
        self.history = install.history
        self.kube = install.double
        self.controllers = HostAwareControllers(install, clock)
        # Opted-in pods only where the webhook runs that twins them.
        self.webhook = install.shape.full
        self.vms = set(install.shape.vm_names)
        self.min_nodes = len(self.vms) - MOST_SPARE
        self._deployments = 0
        self._statefulsets = 0
        self._cordoned: set[str] = set()

    def start(self, rng: random.Random, *, steady: bool = False) -> None:
        """Nodes for all but SPARE_VMS of its VMs, coredns, and two Deployments; steady (the
        soak's), as many Deployments and StatefulSets as it will ever have."""
        for name in sorted(self.vms)[: len(self.vms) - SPARE_VMS]:
            self.kube.seed(node_object(name))
        self.controllers.replicasets.append(
            ReplicaSet(
                COREDNS,
                COREDNS,
                COREDNS_REPLICAS,
                anti_affinity(COREDNS, LABEL_ESXI_HOST),
                namespace=COREDNS_NAMESPACE,
            )
        )
        for _ in range(MAX_DEPLOYMENTS if steady else 2):
            self.create_deployment(rng)
        for _ in range(MAX_STATEFULSETS if steady and self.webhook else 0):
            self.create_statefulset(rng)

    def create_deployment(self, rng: random.Random) -> str:
        if len(self._webs()) >= MAX_DEPLOYMENTS:
            raise LookupError("enough Deployments")
        self._deployments += 1
        name = f"web{self._deployments}"
        replicas = rng.randint(2, 3)
        # Odd ones written as users of the webhook write them (an opted-in hostname term the
        # webhook twins on the host key), even ones on the host key itself; odd ones have a
        # PodDisruptionBudget.
        odd = self._deployments % 2 == 1
        opted_in = odd and self.webhook
        key = HOSTNAME_KEY if opted_in else LABEL_ESXI_HOST
        if opted_in:
            self.controllers.opted_in.add(name)
        self.controllers.replicasets.append(
            ReplicaSet(name, name, replicas, anti_affinity(name, key))
        )
        if odd:
            self.kube.seed(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
                }
            )
        return f"{name} x{replicas}{' (opted in)' if opted_in else ''}"

    def scale_deployment(self, rng: random.Random) -> str:
        rs = rng.choice(self._webs())
        rs.replicas = rng.randint(1, 3)
        live = [p for p in self._pods_of(rs.name) if not terminating(p)]
        for pod in live[rs.replicas :]:
            self.controllers.terminate(pod)
        return f"{rs.name} x{rs.replicas}"

    def roll_deployment(self, rng: random.Random) -> str:
        """A new template with the Recreate strategy: every pod goes, the ReplicaSet's
        controller makes new ones (new names, the same number)."""
        rs = rng.choice(self._webs())
        for pod in self._pods_of(rs.name):
            if not terminating(pod):
                self.controllers.terminate(pod)
        return rs.name

    def delete_deployment(self, rng: random.Random) -> str:
        webs = self._webs()
        if len(webs) <= MIN_DEPLOYMENTS:
            raise LookupError("too few Deployments to delete one")
        rs = rng.choice(webs)
        self.controllers.replicasets.remove(rs)
        for pod in self._pods_of(rs.name):
            if not terminating(pod):
                self.controllers.terminate(pod)
        if self.kube.read("policy/v1", "poddisruptionbudgets", rs.name, NAMESPACE) is not None:
            self.kube.delete("policy/v1", "poddisruptionbudgets", rs.name, NAMESPACE)
        return rs.name

    def create_statefulset(self, rng: random.Random) -> str:
        if len(self.controllers.statefulsets) >= MAX_STATEFULSETS:
            raise LookupError("enough StatefulSets")
        self._statefulsets += 1
        sts = StatefulSet(f"db{self._statefulsets}", rng.randint(2, 3))
        self.controllers.statefulsets.append(sts)
        return f"{sts.name} x{sts.replicas}"

    def scale_statefulset(self, rng: random.Random) -> str:
        sts = rng.choice(self.controllers.statefulsets)
        sts.replicas = rng.randint(1, 3)
        return f"{sts.name} x{sts.replicas}"

    def roll_statefulset(self, rng: random.Random) -> str:
        """A new template: the controller replaces pods from the highest ordinal down."""
        sts = rng.choice(self.controllers.statefulsets)
        sts.revision += 1
        return f"{sts.name} to {sts.revision_hash}"

    def add_node(self, rng: random.Random) -> str:
        free = sorted(self.vms - self._node_names())
        name = rng.choice(free)
        self.kube.seed(node_object(name))
        return name

    def remove_node(self, rng: random.Random) -> str:
        names = sorted(self._node_names())
        if len(names) <= self.min_nodes:
            raise LookupError("too few nodes to remove one")
        name = rng.choice(names)
        for pod in self.controllers.pods():
            if pod["spec"].get("nodeName") == name:
                meta = pod["metadata"]
                self.kube.delete("v1", "pods", meta["name"], meta["namespace"])
        self.kube.delete("v1", "nodes", name)
        self._cordoned.discard(name)
        return name

    def drain(self, rng: random.Random) -> str:
        """kubectl drain: cordon, then the node's pods go (their controllers make new ones)."""
        if len(self._cordoned) >= MAX_CORDONED:
            raise LookupError("enough nodes cordoned")
        name = rng.choice(sorted(self._node_names() - self._cordoned))
        self._set_unschedulable(name, True)
        for pod in self.controllers.pods():
            if pod["spec"].get("nodeName") == name and not terminating(pod):
                self.controllers.terminate(pod)
        return name

    def uncordon(self, rng: random.Random) -> str:
        name = rng.choice(sorted(self._cordoned))
        self._set_unschedulable(name, False)
        return name

    def _set_unschedulable(self, name: str, unschedulable: bool) -> None:
        node = self.kube.read("v1", "nodes", name)
        assert node is not None
        node.setdefault("spec", {})["unschedulable"] = unschedulable
        self.kube.write(node, manager="kubectl")
        if unschedulable:
            self._cordoned.add(name)
        else:
            self._cordoned.discard(name)

    def _webs(self) -> list[ReplicaSet]:
        """The user's Deployments (coredns is the cluster's)."""
        return [rs for rs in self.controllers.replicasets if rs.name != COREDNS]

    def _pods_of(self, owner: str) -> list[dict[str, Any]]:
        return [p for p in self.controllers.pods() if owned_by(p, owner)]

    def _node_names(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.kube.store.objects("nodes", None)}


class Workload:
    """Seeded random operations on the system; `step()` does one: in vCenter (recorded in the
    first install's history) or in one install's cluster (recorded in its own)."""

    def __init__(
        self, system: System, rng: random.Random, clock: Clock, *, steady: bool = False
    ) -> None:
        self.system = system
        self.rng = rng
        self.steady = steady
        self.weights = STEADY_WEIGHTS if steady else WEIGHTS
        self.clock = clock
        self.history = system.first.history
        self.clusters = [Cluster(install, clock) for install in system.installs]
        self.admin_rules = self.history.final.admin_rules
        self._si: vim.ServiceInstance | None = None
        self._vms: list[Any] = []
        self._vms_of: vim.ServiceInstance | None = None
        self._admin_rules = 0

    def start(self) -> None:
        for cluster in self.clusters:
            cluster.start(self.rng, steady=self.steady)

    async def run_controllers(self) -> None:
        """Every cluster's controllers, until cancelled."""
        await asyncio.gather(*(c.controllers.run() for c in self.clusters))

    def vcsim_restarted(self) -> None:
        """vcsim came back with its initial inventory: the admin's rules went with it."""
        self._si = None
        self.admin_rules.clear()

    async def step(self) -> None:
        """One operation, drawn by weight (a Kubernetes one in a cluster drawn by
        INSTALL_WEIGHTS among those that can); vCenter's run in a thread (pyVmomi blocks)."""
        in_vcenter: dict[str, Callable[[], str]] = {
            "vmotion": self._vmotion,
            "admin-drs-rule": self._admin_rule,
        }
        kind = self.rng.choices(list(self.weights), weights=list(self.weights.values()))[0]
        started = self.clock.now()
        history = self.history
        try:
            if kind in in_vcenter:
                detail = await asyncio.to_thread(in_vcenter[kind])
            else:
                cluster = self._cluster_for(kind)
                history = cluster.history
                detail = self._in_kubernetes(cluster, kind)
        except Exception as error:  # vcsim away, or nothing to do it to: a failed operation
            history.operations.append(Operation(started, kind, repr(error)[:200], ok=False))
            if kind in in_vcenter:
                self._si = None
            return
        history.operations.append(Operation(started, kind, detail))

    def _cluster_for(self, kind: str) -> Cluster:
        able = [
            (c, w)
            for c, w in zip(self.clusters, INSTALL_WEIGHTS, strict=True)
            if c.webhook or kind not in STATEFULSET_KINDS
        ]
        return self.rng.choices([c for c, _ in able], weights=[w for _, w in able])[0]

    def _in_kubernetes(self, cluster: Cluster, kind: str) -> str:
        operations: dict[str, Callable[[random.Random], str]] = {
            "deployment-create": cluster.create_deployment,
            "deployment-scale": cluster.scale_deployment,
            "deployment-roll": cluster.roll_deployment,
            "deployment-delete": cluster.delete_deployment,
            "statefulset-create": cluster.create_statefulset,
            "statefulset-scale": cluster.scale_statefulset,
            "statefulset-roll": cluster.roll_statefulset,
            "node-add": cluster.add_node,
            "node-remove": cluster.remove_node,
            "drain": cluster.drain,
            "uncordon": cluster.uncordon,
        }
        return operations[kind](self.rng)

    # -- vCenter (run in a thread: pyVmomi blocks) ----------------------------------------------

    def _admin(self) -> vim.ServiceInstance:
        if self._si is None:
            self._si = self.system.admin()
        return self._si

    def _vmotion(self) -> str:
        si = self._admin()
        # The VMs (a fixed set) listed once per session: each listing is a container view that
        # vCenter keeps until the session ends, and a soak vMotions hundreds of times.
        if self._vms_of is not si:
            self._vms, self._vms_of = inventory(si, vim.VirtualMachine), si
        vms = self._vms
        vm = self.rng.choice(sorted(vms, key=lambda v: v.name))
        hosts = sorted(
            (h for h in vm.runtime.host.parent.host if h != vm.runtime.host), key=lambda h: h.name
        )
        target = self.rng.choice(hosts)
        finished(vm.RelocateVM_Task(vim.vm.RelocateSpec(host=target)))
        return f"{vm.name} -> {target.name}"

    def _admin_rule(self) -> str:
        """Add a rule of the admin's own, or edit one they made; remember what they set."""
        si = self._admin()
        clusters = sorted(inventory(si, vim.ClusterComputeResource), key=lambda c: c._moId)
        cluster = self.rng.choice(clusters)
        vms = sorted((vm for h in cluster.host for vm in h.vm), key=lambda v: v.name)
        chosen = self.rng.sample(vms, 2)
        mine = [r for r in cluster.configurationEx.rule or () if r.name.startswith(ADMIN_PREFIX)]
        if mine and self.rng.random() < 0.5:
            rule = self.rng.choice(mine)
            info = vim.cluster.AntiAffinityRuleSpec(
                key=rule.key, name=rule.name, enabled=True, vm=chosen
            )
            operation = "edit"
        else:
            self._admin_rules += 1
            info = vim.cluster.AntiAffinityRuleSpec(
                name=f"{ADMIN_PREFIX}{self._admin_rules}", enabled=True, vm=chosen
            )
            operation = "add"
        spec = vim.cluster.ConfigSpecEx(
            rulesSpec=[vim.cluster.RuleSpec(operation=operation, info=info)]
        )
        finished(cluster.ReconfigureComputeResource_Task(spec=spec, modify=True))
        stored = next(r for r in cluster.configurationEx.rule if r.name == info.name)
        self.admin_rules[(cluster._moId, info.name)] = fields(stored)
        return f"{operation} {info.name} in {cluster._moId}: {[vm.name for vm in chosen]}"
