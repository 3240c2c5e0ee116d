"""The run's probe: about once a second, whether each install's labels, topology KV and DRS
rules agree with vCenter, and whether any pod still violates required host anti-affinity while a
host is free for it, recorded as an `Agreement` in the install's history (convergence.py reads
them against the faults).

It reads what the final checks read, through the same functions (checker.py's
`drs_rules_match_pods` and `shared_hosts`), so "agreed" means what the invariants mean. One
property collector call reads vCenter's VMs, hosts and DRS objects for both installs (through
one container view per admin session, not a new one per probe, which vcsim would keep), and
each install's
bus is read through one `cli` connection opened when the probing starts (every replica ready)
and kept, nats-py reconnecting it after a server's loss, so a probe costs a few tens of
milliseconds on a quiet machine.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final

from pyVmomi import vim, vmodl

from hostaffinity.cli.reading import drs_records
from hostaffinity.schema import LABEL_ESXI_HOST, NodePlacement, label_value
from tests.campaign.buses import InstallBuses
from tests.campaign.checker import drs_rules_match_pods, shared_hosts
from tests.campaign.history import Agreement, Clock, FinalState, History
from tests.campaign.install import Install
from tests.campaign.snapshot import desired_drs, drs_objects
from tests.campaign.system import AdminSession, System

PROBE_EVERY_S: Final = 1.0
PROBE_TIMEOUT_S: Final = 3.0
DISAGREE: Final = (False, False, False, False)
Truth = dict[str, tuple[str, str]]
DrsState = dict[str, dict[str, dict[str, Any]]]


@dataclass
class Prober:
    """Probes every install until cancelled; `durations` keeps each probe's cost (seconds)."""

    system: System
    clock: Clock
    durations: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._vcenter = AdminSession(self.system.admin)
        self._view = VcenterView()
        self._buses = InstallBuses(self.system, "cli")

    async def run(self) -> None:
        try:
            await self._buses.open()
            while True:
                started = self.clock.now()
                await self.probe()
                self.durations.append(self.clock.now() - started)
                await asyncio.sleep(max(0.0, PROBE_EVERY_S - (self.clock.now() - started)))
        finally:
            await self._buses.close()

    async def probe(self) -> list[Agreement]:
        """One probe of every install, appended to each install's history."""
        t = self.clock.now()
        try:
            truth, drs = await asyncio.to_thread(self._vcenter.call, self._view.state)
        except Exception:  # vcsim away: nothing agrees with it
            truth, drs = None, {}
        probed = []
        for install in self.system.installs:
            paths = DISAGREE if truth is None else await self._paths(install, truth, drs)
            agreement = Agreement(t, *paths)
            install.history.agreements.append(agreement)
            probed.append(agreement)
        return probed

    async def labels_and_kv_agree(self) -> bool:
        """Every install's labels and KV agree with vCenter now (the quiet period's wait)."""
        return all(a.labels and a.kv for a in await self.probe())

    async def _paths(
        self,
        install: Install,
        truth: Truth,
        drs: DrsState,
    ) -> tuple[bool, bool, bool, bool]:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                bus = self._buses.by_install[install.shape.name]
                topology = await (await bus.topology()).snapshot()
                records = await drs_records(bus)
        except Exception:  # its bus away or slow: nothing of it can be said to agree
            return DISAGREE
        nodes = install.double.store.objects("nodes", None)
        pods = install.double.store.objects("pods", None)
        labels = kv = True
        for node in nodes:
            name = node["metadata"]["name"]
            host_moid, host_label = truth.get(name, ("", ""))
            placement = topology.nodes.get(name)
            labels &= (node["metadata"].get("labels") or {}).get(LABEL_ESXI_HOST) == host_label
            kv &= isinstance(placement, NodePlacement) and placement.host_moid == host_moid
        final = FinalState(
            vm_hosts=truth,
            drs=drs,
            pods=pods,
            schedulable={
                n["metadata"]["name"]
                for n in nodes
                if not (n.get("spec") or {}).get("unschedulable")
            },
        )
        desired = desired_drs(
            install.token,
            install.double.store.objects("namespaces", None),
            pods,
            topology,
            records,
        )
        for moid, cluster in desired.clusters.items():
            final.planned[moid] = {n: (o.vms, o.hosts) for n, o in cluster.objects.items()}
            final.held[moid] = set(cluster.held)
        rules = drs_rules_match_pods(History(install=install.token, final=final))
        repaired = not any(s.shared and s.free for s in shared_hosts(final))
        return labels, kv, not rules.breaches, repaired


class VcenterView:
    """What a probe reads of vCenter (snapshot.py's `vcenter_truth` and `drs_state`), in one
    property collector call over a container view made once per admin session."""

    def __init__(self) -> None:
        self._si: vim.ServiceInstance | None = None
        self._spec: Any = None

    def state(self, si: vim.ServiceInstance) -> tuple[Truth, DrsState]:
        """VM name → (host moid, host label value), and cluster moid → its DRS objects."""
        if self._si is not si:
            self._si, self._spec = si, _filter_spec(si)
        content = si.RetrieveContent()
        found = content.propertyCollector.RetrieveContents([self._spec])
        props: dict[tuple[type, str], dict[str, Any]] = {
            (type(o.obj), o.obj._moId): {p.name: p.val for p in o.propSet} for o in found
        }
        hosts = {moid: p["name"] for (kind, moid), p in props.items() if kind is vim.HostSystem}
        truth = {
            p["name"]: (p["runtime.host"]._moId, label_value(hosts[p["runtime.host"]._moId]))
            for (kind, _), p in props.items()
            if kind is vim.VirtualMachine
        }
        drs = {
            moid: drs_objects(p["configurationEx"])
            for (kind, moid), p in props.items()
            if kind is vim.ClusterComputeResource
        }
        return truth, drs


def _filter_spec(si: vim.ServiceInstance) -> vmodl.query.PropertyCollector.FilterSpec:
    """What a probe reads, over a container view of the whole inventory made once."""
    content = si.RetrieveContent()
    kinds = [vim.VirtualMachine, vim.HostSystem, vim.ClusterComputeResource]
    view = content.viewManager.CreateContainerView(content.rootFolder, kinds, True)
    collector = vmodl.query.PropertyCollector
    traverse = collector.TraversalSpec(name="view", type=vim.view.ContainerView, path="view")
    return collector.FilterSpec(
        objectSet=[collector.ObjectSpec(obj=view, skip=True, selectSet=[traverse])],
        propSet=[
            collector.PropertySpec(type=vim.VirtualMachine, pathSet=["name", "runtime.host"]),
            collector.PropertySpec(type=vim.HostSystem, pathSet=["name"]),
            collector.PropertySpec(type=vim.ClusterComputeResource, pathSet=["configurationEx"]),
        ],
    )
