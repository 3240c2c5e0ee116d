"""Reading the world after the quiet period into each install's `FinalState`: vCenter's truth
and DRS state (an admin's pyVmomi session, the same for both), the install's double's store, its
bus as the read-only `cli` identity, the drs-translator's own planner run on its final pods with
its install token, and each of its replicas' /readyz."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pyVmomi import vim

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import decode_namespace, decode_pod
from hostaffinity.cli.reading import drs_records
from hostaffinity.drs_translator.core.plan import Plan, PlannerSettings
from hostaffinity.drs_translator.core.planner import plan
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import DrsOwnership, EsxiHost, NodePlacement, TopologySnapshot, label_value
from tests.campaign.history import FinalState
from tests.campaign.install import VCENTER_NAME, Install
from tests.campaign.system import System
from tests.e2e.drs_harness import fields
from tests.e2e.harness import inventory
from tests.e2e.labeller_harness import stream_events


def vcenter_truth(si: vim.ServiceInstance) -> dict[str, tuple[str, str]]:
    """VM name → (its host's moid, that host's label value)."""
    return {
        vm.name: (vm.runtime.host._moId, label_value(vm.runtime.host.name))
        for vm in inventory(si, vim.VirtualMachine)
    }


def drs_state(si: vim.ServiceInstance) -> dict[str, dict[str, dict[str, Any]]]:
    """Cluster moid → name → fields of every DRS rule and group in it."""
    return {
        cluster._moId: drs_objects(cluster.configurationEx)
        for cluster in inventory(si, vim.ClusterComputeResource)
    }


def drs_objects(config: Any) -> dict[str, dict[str, Any]]:
    """Name → fields of every DRS rule and group of a cluster's `configurationEx`."""
    objects = {r.name: fields(r) for r in config.rule or ()}
    objects.update({g.name: fields(g) for g in config.group or ()})
    return objects


async def kv_hosts(cli: Bus) -> dict[str, str | None]:
    """Node → the host moid its KV value names ("undecodable" for garbage)."""
    snapshot = await (await cli.topology()).snapshot()
    return {
        node: p.host_moid if isinstance(p, NodePlacement) else "undecodable"
        for node, p in snapshot.nodes.items()
    }


async def planned_drs(cli: Bus, install: Install, final: FinalState) -> None:
    """What the install's drs-translator's planner wants from its final pods, its KV's topology
    and its rules' ownership records."""
    desired = desired_drs(
        install.token,
        install.double.store.objects("namespaces", None),
        final.pods,
        await (await cli.topology()).snapshot(),
        await drs_records(cli),
    )
    for moid, cluster in desired.clusters.items():
        final.planned[moid] = {n: (o.vms, o.hosts) for n, o in cluster.objects.items()}
        final.held[moid] = set(cluster.held)


def desired_drs(
    install: str,
    namespaces: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    topology: TopologySnapshot,
    records: list[DrsOwnership],
) -> Plan:
    """The planner's run as the translator makes it: with the names of the rules we hold, which
    decide which of two groups kept apart on the same VMs names their rule (`Planning`'s
    `existing`). Without them a rule kept through a group's arrival read as one no pod asks
    for, beside one planned but missing, with the same VMs. `install` is the install's token."""
    index = ClusterIndex()
    for namespace in namespaces:
        index.upsert_namespace(decode_namespace(json.dumps(namespace)))
    decoded = [decode_pod(json.dumps(pod)) for pod in pods]
    for pod in decoded:
        index.upsert_pod(pod)
    placements = {n: p for n, p in topology.nodes.items() if isinstance(p, NodePlacement)}
    hosts = {h: e for h, e in topology.hosts.items() if isinstance(e, EsxiHost)}
    existing: dict[str, set[str]] = {}
    for record in records:
        if record.vcenter == VCENTER_NAME:
            existing.setdefault(record.cluster_moid, set()).add(record.name)
    return plan(
        index,
        placements,
        hosts,
        decoded,
        PlannerSettings(vcenter=VCENTER_NAME, install=install),
        existing,
    )


async def read_final(system: System) -> None:
    """Fill each install's `history.final` (the admin's rules are already in the first's) and
    `history.events`."""
    si = await asyncio.to_thread(system.admin)
    vm_hosts = await asyncio.to_thread(vcenter_truth, si)
    drs = await asyncio.to_thread(drs_state, si)
    for install in system.installs:
        history = install.history
        final = history.final
        final.vm_hosts, final.drs = vm_hosts, drs
        nodes = install.double.store.objects("nodes", None)
        final.node_labels = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes
        }
        final.schedulable = {
            n["metadata"]["name"] for n in nodes if not (n.get("spec") or {}).get("unschedulable")
        }
        final.pods = install.double.store.objects("pods", None)
        final.kube_events = install.double.store.objects("events", None)
        async with install.connection("cli") as cli:
            final.kv_hosts = await kv_hosts(cli)
            await planned_drs(cli, install, final)
            history.events = list(enumerate(await stream_events(cli), start=1))
        for name, replica in install.replicas.items():
            final.readiness[name] = await replica.ready()
