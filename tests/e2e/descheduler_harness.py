"""Runs the descheduler in-process against the Kubernetes double and a real nats-server, with
stand-ins for the controllers a real cluster runs around it.

The stand-ins (ReplicaSet controller, kube-scheduler, kubelet, disruption controller) act on
their own clock, polling the store as informers would see it, never in lockstep with the
descheduler: an evicted pod stays Terminating for its grace period (the kubelet), its
replacement is created as soon as the deletionTimestamp shows (ReplicaSet controller: a
terminating pod is not active), bound to the node with the fewest replicas of its app
(kube-scheduler honouring preferred hostname anti-affinity), and a PDB's disruptionsAllowed is
recomputed from the Ready, non-terminating pods (pkg/controller/disruption/disruption.go).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostaffinity.descheduler.config import DeschedulerConfig, DeschedulerSettings, ExecutorSettings
from hostaffinity.descheduler.main import service_spec
from hostaffinity.descheduler.service import DeschedulerWork
from hostaffinity.runtime.runner import running_service
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.harness import BusPlatform, eventually, runner_sections
from tests.platform.kube_double import KubeDouble


def descheduler_config(
    nats: BusPlatform, kubeconfig: Path, policy: Path | None = None, **settings: Any
) -> DeschedulerConfig:
    eviction = settings.pop(
        "eviction", ExecutorSettings(retry_initial_seconds=0.2, retry_max_seconds=1.0)
    )
    descheduler = DeschedulerSettings(
        policy_file=None if policy is None else str(policy), eviction=eviction, **settings
    )
    return DeschedulerConfig(
        **runner_sections(nats, kubeconfig, "descheduler"), descheduler=descheduler
    )


@contextlib.asynccontextmanager
async def running_descheduler(
    config: DeschedulerConfig, identity: str = "descheduler-a"
) -> AsyncIterator[DeschedulerWork]:
    """The service as main() starts it, until the block ends (then stopped as SIGTERM would)."""
    work = DeschedulerWork()
    async with running_service(service_spec(work), config, identity=identity):
        await eventually(work.synced, "descheduler synced", within=20)
        yield work


def terminating(kube: KubeDouble) -> list[str]:
    """The pods with a deletionTimestamp (evicted, not yet gone), by name."""
    return sorted(
        p["metadata"]["name"]
        for p in kube.store.objects("pods", "default")
        if p["metadata"].get("deletionTimestamp")
    )


def node_object(
    name: str, labels: dict[str, str] | None = None, *, unschedulable: bool = False
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_object(
    name: str,
    app: str,
    node: str,
    *,
    owner: str,
    affinity: dict[str, Any] | None,
    namespace: str = "default",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
        "terminationGracePeriodSeconds": 1,
    }
    if node:
        spec["nodeName"] = node
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": app},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        if node
        else {"phase": "Pending"},
    }


def launcher_object(vmi: str, node: str) -> dict[str, Any]:
    """The virt-launcher pod running the VMI `vmi` on `node`."""
    pod = pod_object(f"virt-launcher-{vmi}-x7k2p", "vm", node, owner=vmi, affinity=None)
    pod["metadata"]["labels"] = {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": vmi}
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "name": vmi,
            "uid": f"uid-{vmi}",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return pod


@dataclass
class ReplicaSet:
    name: str
    app: str
    replicas: int
    affinity: dict[str, Any] | None
    namespace: str = "default"
    created: int = 0


@dataclass
class Controllers:
    """The stand-ins, stepping every `period` seconds until cancelled."""

    kube: KubeDouble
    replicasets: list[ReplicaSet]
    grace_s: float = 0.3
    ready_after_s: float = 0.3
    period_s: float = 0.05
    terminating_since: dict[str, float] = field(default_factory=dict)
    bound_at: dict[str, float] = field(default_factory=dict)
    evicted: list[tuple[float, str]] = field(default_factory=list)
    # The fewest Ready, non-terminating replicas seen at once (what a PDB protects).
    min_available: int | None = None

    async def run(self) -> None:
        while True:
            self.step()
            await asyncio.sleep(self.period_s)

    def pods(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self.kube.store.objects("pods", namespace)

    def step(self) -> None:
        now = time.monotonic()
        terminating = [p for p in self.pods() if p["metadata"].get("deletionTimestamp")]
        for pod in terminating:
            name = pod["metadata"]["name"]
            if name not in self.terminating_since:
                self.terminating_since[name] = now
                self.evicted.append((now, name))
        available = sum(
            1 for p in self.pods() if ready(p) and not p["metadata"].get("deletionTimestamp")
        )
        if self.min_available is None or available < self.min_available:
            self.min_available = available
        for pod in terminating:  # kubelet: gone after the grace period
            name = pod["metadata"]["name"]
            if now - self.terminating_since[name] >= self.grace_s:
                self.kube.delete("v1", "pods", name, pod["metadata"]["namespace"])
        for rs in self.replicasets:
            self._reconcile(rs)
        self._schedule(now)
        self._start(now)
        self._disruption()

    def _reconcile(self, rs: ReplicaSet) -> None:
        active = [
            p
            for p in self.pods(rs.namespace)
            if owned_by(p, rs.name) and not p["metadata"].get("deletionTimestamp")
        ]
        for _ in range(rs.replicas - len(active)):
            rs.created += 1
            self.kube.seed(
                pod_object(
                    f"{rs.name}-new{rs.created}",
                    rs.app,
                    "",
                    owner=rs.name,
                    affinity=rs.affinity,
                    namespace=rs.namespace,
                )
            )

    def _start(self, now: float) -> None:
        """kubelet: a bound pod turns Ready a little after it was bound."""
        for pod in self.pods():
            name = pod["metadata"]["name"]
            bound = self.bound_at.get(name)
            if bound is not None and now - bound >= self.ready_after_s:
                del self.bound_at[name]
                ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                self.kube.write({**pod, "status": ready}, manager="kubelet")

    def _schedule(self, now: float) -> None:
        nodes = [
            n
            for n in self.kube.store.objects("nodes", None)
            if not (n.get("spec") or {}).get("unschedulable")
        ]
        for pod in self.pods():
            if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            app = pod["metadata"]["labels"]["app"]

            def load(node: dict[str, Any], app: str = app) -> int:
                name = node["metadata"]["name"]
                return sum(
                    1
                    for p in self.pods()
                    if p["spec"].get("nodeName") == name
                    and p["metadata"]["labels"].get("app") == app
                )

            def preference(node: dict[str, Any], spec: dict[str, Any] = pod["spec"]) -> int:
                return _preferred_weight(spec, node["metadata"].get("labels") or {})

            # NodeAffinity's preferred terms first, then spreading (the default profile's scores
            # reduced to the two this test cluster exercises).
            target = min(nodes, key=lambda n: (-preference(n), load(n), n["metadata"]["name"]))
            bound = {
                **pod,
                "spec": {**pod["spec"], "nodeName": target["metadata"]["name"]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            self.kube.write(bound, manager="kube-scheduler")

    def _disruption(self) -> None:
        for pdb in self.kube.store.objects("poddisruptionbudgets.policy", "default"):
            selector = pdb["spec"]["selector"]["matchLabels"]
            matching = [
                p
                for p in self.pods()
                if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())
            ]
            healthy = sum(
                1
                for p in matching
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            )
            expected = next(
                (rs.replicas for rs in self.replicasets if rs.app == selector.get("app")),
                len(matching),
            )
            desired = expected - int(pdb["spec"].get("maxUnavailable", 0))
            status = {
                "observedGeneration": pdb["metadata"].get("generation", 1),
                "disruptionsAllowed": max(0, healthy - desired),
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "expectedPods": expected,
            }
            current = pdb.get("status") or {}
            if any(current.get(k) != v for k, v in status.items()):
                self.kube.write(
                    {**pdb, "status": {**current, **status}}, manager="kube-controller-manager"
                )


def owned_by(pod: dict[str, Any], owner: str) -> bool:
    return any(r.get("name") == owner for r in pod["metadata"].get("ownerReferences", []))


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _preferred_weight(spec: dict[str, Any], labels: dict[str, str]) -> int:
    """Sum of the pod's preferred node affinity weights this node's labels satisfy (In only)."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    total = 0
    for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        expressions = term["preference"].get("matchExpressions") or []
        if all(labels.get(e["key"]) in e.get("values", []) for e in expressions):
            total += int(term["weight"])
    return total


def web_pod(name: str, node: str) -> dict[str, Any]:
    """A replica of web-rs on `node` that requires its siblings on other ESXi hosts."""
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": LABEL_ESXI_HOST}
            ]
        }
    }
    return pod_object(name, "web", node, owner="web-rs", affinity=apart)
