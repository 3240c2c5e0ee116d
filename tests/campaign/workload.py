"""What users, an admin and the cluster's own controllers do during a campaign.

The controllers are tests/e2e/descheduler_harness.py's stand-ins (ReplicaSet controller,
kubelet, disruption controller) with a scheduler that honours required host anti-affinity from
the node labels, as kube-scheduler with the ESXi-host key would. The user creates, scales and
deletes Deployments with host anti-affinity (one with a PodDisruptionBudget), adds and removes
nodes, drains and uncordons; vMotions move node VMs within their cluster; an admin adds and edits
DRS rules of their own by hand. Every operation is in the history; one that failed (vcsim was
away) is recorded as failed and the campaign goes on.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any, Final

from pyVmomi import vim

from hostaffinity.schema import LABEL_ESXI_HOST
from tests.campaign.history import Clock, History, Operation
from tests.campaign.system import System
from tests.e2e.descheduler_harness import Controllers, ReplicaSet, node_object
from tests.e2e.drs_harness import fields
from tests.e2e.harness import finished, inventory

NAMESPACE: Final = "default"
MIN_NODES: Final = 5
MAX_DEPLOYMENTS: Final = 4
ADMIN_PREFIX: Final = "admin-rule-"
MIN_DEPLOYMENTS: Final = 2
MAX_CORDONED: Final = 2
WEIGHTS: Final = {
    "vmotion": 4,
    "admin-drs-rule": 1,
    "deployment-create": 2,
    "deployment-scale": 2,
    "deployment-delete": 1,
    "node-add": 1,
    "node-remove": 1,
    "drain": 1,
    "uncordon": 2,
}


def host_anti_affinity(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": LABEL_ESXI_HOST}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


class HostAwareControllers(Controllers):
    """The harness's controllers, scheduling by node labels: a pod with required host
    anti-affinity goes only to a labelled node whose host holds no replica of its app."""

    def _schedule(self, now: float) -> None:
        nodes = [
            n
            for n in self.kube.store.objects("nodes", None)
            if not (n.get("spec") or {}).get("unschedulable")
        ]
        host_of = {
            n["metadata"]["name"]: n["metadata"].get("labels", {}).get(LABEL_ESXI_HOST)
            for n in nodes
        }
        for pod in self.pods():
            if pod["spec"].get("nodeName") or terminating(pod):
                continue
            app = pod["metadata"]["labels"]["app"]
            peers = [
                p
                for p in self.pods()
                if p["metadata"]["labels"].get("app") == app
                and p["spec"].get("nodeName")
                and not terminating(p)
            ]
            taken = {host_of.get(p["spec"]["nodeName"]) for p in peers}
            fits = [
                n
                for n in nodes
                if not pod["spec"].get("affinity")
                or (host_of[n["metadata"]["name"]] and host_of[n["metadata"]["name"]] not in taken)
            ]
            if not fits:
                continue  # Pending, as kube-scheduler leaves an unschedulable pod
            load = {n["metadata"]["name"]: 0 for n in fits}
            for p in peers:
                if p["spec"]["nodeName"] in load:
                    load[p["spec"]["nodeName"]] += 1
            target = min(load, key=lambda name: (load[name], name))
            bound = {
                **pod,
                "spec": {**pod["spec"], "nodeName": target},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            self.kube.write(bound, manager="kube-scheduler")


class Workload:
    """Seeded random operations on the system; `step()` does one."""

    def __init__(self, system: System, rng: random.Random, history: History, clock: Clock) -> None:
        self.system = system
        self.rng = rng
        self.history = history
        self.clock = clock
        self.kube = system.double
        self.controllers = HostAwareControllers(system.double, [])
        self.admin_rules = history.final.admin_rules
        self._si: vim.ServiceInstance | None = None
        self._deployments = 0
        self._admin_rules = 0
        self._cordoned: set[str] = set()
        self.vms: dict[str, str] = {}  # VM name -> cluster moid

    async def start(self, nodes: int) -> None:
        """Nodes for the first `nodes` VMs, and two Deployments."""
        si = await asyncio.to_thread(self._admin)
        self.vms = await asyncio.to_thread(
            lambda: {
                vm.name: vm.runtime.host.parent._moId for vm in inventory(si, vim.VirtualMachine)
            }
        )
        for name in sorted(self.vms)[:nodes]:
            self.kube.seed(node_object(name))
        for _ in range(2):
            self._create_deployment()

    def vcsim_restarted(self) -> None:
        """vcsim came back with its initial inventory: the admin's rules went with it."""
        self._si = None
        self.admin_rules.clear()

    async def step(self) -> None:
        """One operation, drawn by weight; vCenter's run in a thread (pyVmomi blocks)."""
        in_vcenter: dict[str, Callable[[], str]] = {
            "vmotion": self._vmotion,
            "admin-drs-rule": self._admin_rule,
        }
        in_kubernetes: dict[str, Callable[[], str]] = {
            "deployment-create": self._create_deployment,
            "deployment-scale": self._scale_deployment,
            "deployment-delete": self._delete_deployment,
            "node-add": self._add_node,
            "node-remove": self._remove_node,
            "drain": self._drain,
            "uncordon": self._uncordon,
        }
        kind = self.rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        started = self.clock.now()
        try:
            if kind in in_vcenter:
                detail = await asyncio.to_thread(in_vcenter[kind])
            else:
                detail = in_kubernetes[kind]()
        except Exception as error:  # vcsim away, or nothing to do it to: a failed operation
            self.history.operations.append(Operation(started, kind, repr(error)[:200], ok=False))
            if kind in in_vcenter:
                self._si = None
            return
        self.history.operations.append(Operation(started, kind, detail))

    # -- vCenter (run in a thread: pyVmomi blocks) ----------------------------------------------

    def _admin(self) -> vim.ServiceInstance:
        if self._si is None:
            self._si = self.system.admin()
        return self._si

    def _vmotion(self) -> str:
        si = self._admin()
        vms = inventory(si, vim.VirtualMachine)
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

    # -- the Kubernetes side (the double's store, as controllers and kubectl write it) ---------

    def _create_deployment(self) -> str:
        if len(self.controllers.replicasets) >= MAX_DEPLOYMENTS:
            raise LookupError("enough Deployments")
        self._deployments += 1
        name = f"web{self._deployments}"
        replicas = self.rng.randint(2, 3)
        self.controllers.replicasets.append(
            ReplicaSet(name, name, replicas, host_anti_affinity(name))
        )
        if self._deployments % 2 == 1:
            self.kube.seed(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
                }
            )
        return f"{name} x{replicas}"

    def _scale_deployment(self) -> str:
        rs = self.rng.choice(self.controllers.replicasets)
        rs.replicas = self.rng.randint(1, 3)
        live = [p for p in self._pods_of(rs.name) if not terminating(p)]
        for pod in live[rs.replicas :]:
            self._terminate(pod)
        return f"{rs.name} x{rs.replicas}"

    def _delete_deployment(self) -> str:
        if len(self.controllers.replicasets) <= MIN_DEPLOYMENTS:
            raise LookupError("too few Deployments to delete one")
        rs = self.rng.choice(self.controllers.replicasets)
        self.controllers.replicasets.remove(rs)
        for pod in self._pods_of(rs.name):
            if not terminating(pod):
                self._terminate(pod)
        if self.kube.read("policy/v1", "poddisruptionbudgets", rs.name, NAMESPACE) is not None:
            self.kube.delete("policy/v1", "poddisruptionbudgets", rs.name, NAMESPACE)
        return rs.name

    def _add_node(self) -> str:
        free = sorted(set(self.vms) - self._node_names())
        name = self.rng.choice(free)
        self.kube.seed(node_object(name))
        return name

    def _remove_node(self) -> str:
        names = sorted(self._node_names())
        if len(names) <= MIN_NODES:
            raise LookupError("too few nodes to remove one")
        name = self.rng.choice(names)
        for pod in self.controllers.pods():
            if pod["spec"].get("nodeName") == name:
                self.kube.delete("v1", "pods", pod["metadata"]["name"], NAMESPACE)
        self.kube.delete("v1", "nodes", name)
        self._cordoned.discard(name)
        return name

    def _drain(self) -> str:
        """kubectl drain: cordon, then the node's pods go (their controllers make new ones)."""
        if len(self._cordoned) >= MAX_CORDONED:
            raise LookupError("enough nodes cordoned")
        name = self.rng.choice(sorted(self._node_names() - self._cordoned))
        self._set_unschedulable(name, True)
        for pod in self.controllers.pods():
            if pod["spec"].get("nodeName") == name and not terminating(pod):
                self._terminate(pod)
        return name

    def _uncordon(self) -> str:
        name = self.rng.choice(sorted(self._cordoned))
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

    def _terminate(self, pod: dict[str, Any]) -> None:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.kube.write(pod, manager="kube-controller-manager")

    def _pods_of(self, owner: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.controllers.pods()
            if any(r.get("name") == owner for r in p["metadata"].get("ownerReferences", []))
        ]

    def _node_names(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.kube.store.objects("nodes", None)}
