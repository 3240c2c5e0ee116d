"""Runs node-labeller replicas in-process against vcsim, nats-server and the Kubernetes double."""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from pyVmomi import vim, vmodl

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.labeller import Labeller
from hostaffinity.node_labeller.main import service_spec
from hostaffinity.node_labeller.service import NodeLabellerWork
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.runner import ServiceRunner, running_service
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.schema import EVENTS_STREAM, LABEL_ESXI_HOST, TopologyEvent, decode_event
from tests.e2e.harness import BusPlatform, eventually, finished, inventory, runner_sections
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.nats_cluster import NatsCluster
from tests.platform.vcsim import Vcsim, VcsimFactory, updates_followed


def labeller_config(
    vc: Vcsim, nats: BusPlatform, kubeconfig: Path, /, **overrides: Any
) -> NodeLabellerConfig:
    """A labeller config for these parts, the vCenter named `vcsim`; keywords override fields
    (`vcenters` too)."""
    fields = {"vcenters": [vc.settings(name="vcsim")]}
    return NodeLabellerConfig(
        **(runner_sections(nats, kubeconfig, "node-labeller") | fields | overrides)
    )


def node_object(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}, **extra}


def seed_nodes(kube: KubeDouble, si: vim.ServiceInstance, names: list[str]) -> None:
    """Nodes named like their VMs; node-1 carries a providerID so the first rule is exercised."""
    for name in names:
        extra: dict[str, Any] = {}
        if name == "node-1":
            uuid = vm_by_name(si, name).config.uuid
            extra["spec"] = {"providerID": f"vsphere://{uuid}"}
        kube.seed(node_object(name, **extra))


@dataclass(frozen=True)
class Replica:
    """One labeller replica started through the runner, as `main()` starts it."""

    runner: ServiceRunner[NodeLabellerConfig]
    work: NodeLabellerWork

    @property
    def standby(self) -> bool:
        return not self.runner.working.is_set()

    @property
    def watcher(self) -> InventoryWatcher | None:
        """The first vCenter's watcher, once the replica leads."""
        return self.work.watchers[0] if self.work.watchers else None

    @property
    def labeller(self) -> Labeller:
        """The working Labeller (the replica leads)."""
        assert self.work.labeller is not None, "the replica does not lead"
        return self.work.labeller

    def ready(self) -> bool:
        return self.work.ready()


@contextlib.asynccontextmanager
async def running(
    config: NodeLabellerConfig, identity: str = "replica-a"
) -> AsyncIterator[Replica]:
    """A replica running until the block ends (then stopped as SIGTERM would)."""
    work = NodeLabellerWork()
    async with running_service(service_spec(work), config, identity=identity) as runner:
        yield Replica(runner, work)


# Two vCenters' node VMs: vc-a has three hosts and a1..a3, vc-b two hosts and b1, b2.
VC_A_NODES = ["a1", "a2", "a3"]
VC_B_NODES = ["b1", "b2"]


@dataclass(frozen=True)
class TwoVCenters:
    """Two vcsim instances named vc-a and vc-b, with the test's own session to each. vcsim
    gives both the same moids (`host-...`, `vm-...`, `domain-c...`), as two real vCenters may."""

    a: Vcsim
    b: Vcsim
    admin_a: vim.ServiceInstance
    admin_b: vim.ServiceInstance

    @property
    def settings(self) -> list[VCenterSettings]:
        return [self.a.settings(name="vc-a"), self.b.settings(name="vc-b")]


@dataclass(frozen=True)
class LabellerParts:
    """The real parts a labeller runs against (the `parts` fixture of tests/e2e)."""

    vcsim: VcsimFactory
    nats: BusPlatform
    kube: KubeDouble
    kubeconfig: Path

    def vcenter(self, vms: int, nodes: Sequence[str]) -> tuple[Vcsim, vim.ServiceInstance]:
        """vcsim with three hosts and `vms` node VMs, a Node for each of `nodes`, and the
        test's own vCenter session."""
        vc = self.vcsim(hosts=3, vms=vms)
        admin = vc.connect()
        seed_nodes(self.kube, admin, list(nodes))
        return vc, admin

    def two_vcenters(self, nodes: Sequence[str] = (*VC_A_NODES, *VC_B_NODES)) -> TwoVCenters:
        """vc-a and vc-b, and a Node for each of `nodes` (named like their VMs)."""
        a = self.vcsim(hosts=3, vm_names=VC_A_NODES)
        b = self.vcsim(hosts=2, vm_names=VC_B_NODES)
        for name in nodes:
            self.kube.seed(node_object(name))
        return TwoVCenters(a, b, a.connect(), b.connect())

    @contextlib.asynccontextmanager
    async def labeller(self, vc: Vcsim, **overrides: Any) -> AsyncIterator[Replica]:
        """A replica for these parts (config keywords override), ready: it has labelled."""
        config = labeller_config(vc, self.nats, self.kubeconfig, **overrides)
        async with running(config) as replica:
            await wait_ready(replica)
            yield replica


async def wait_ready(replica: Replica, within: float = 20.0) -> None:
    await eventually(lambda: not replica.standby and replica.ready(), "labeller ready", within)


def node_labels(kube: KubeDouble, name: str) -> dict[str, str]:
    stored = kube.read("v1", "nodes", name)
    assert stored is not None, name
    labels: dict[str, str] = stored["metadata"].get("labels", {})
    return labels


async def stream_events(bus: Bus) -> list[TopologyEvent]:
    """Every event the stream holds, oldest first."""
    info = await bus.js.stream_info(EVENTS_STREAM)
    events = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        with contextlib.suppress(Exception):  # a sequence may have been removed
            message = await bus.js.get_msg(EVENTS_STREAM, seq)
            events.append(decode_event(message.data or b""))
    return events


def session_keys(si: vim.ServiceInstance) -> set[str]:
    """The keys of every session vCenter holds now."""
    manager = si.RetrieveContent().sessionManager
    assert manager is not None
    return {session.key for session in manager.sessionList}


def vm_by_name(si: vim.ServiceInstance, name: str) -> Any:
    return next(vm for vm in inventory(si, vim.VirtualMachine) if vm.name == name)


def host_by_name(si: vim.ServiceInstance, name: str) -> Any:
    return next(host for host in inventory(si, vim.HostSystem) if host.name == name)


def relocate(si: vim.ServiceInstance, vm_name: str, host_name: str) -> Any:
    """RelocateVM_Task to a host, waited for; returns the task info."""
    spec = vim.vm.RelocateSpec(host=host_by_name(si, host_name))
    return finished(vm_by_name(si, vm_name).RelocateVM_Task(spec))


def as_json(obj: Any) -> Any:
    return json.loads(msgspec.json.encode(obj))


# The world of the fault tests: six node VMs on three ESXi hosts, and how long they may take
# to agree with vCenter again.
NODES = [f"node-{i}" for i in range(1, 7)]
HOSTS = ["DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"]
RECOVERY_SECONDS = 30.0


def vcenter_truth(si: vim.ServiceInstance) -> dict[str, str]:
    """Each node VM's ESXi host name, as vCenter has it now."""
    return {name: vm_by_name(si, name).runtime.host.name for name in NODES}


async def truth_everywhere(
    kube: KubeDouble, admin: vim.ServiceInstance, nats: NatsServer | NatsCluster
) -> dict[str, tuple[str, str | None]]:
    """Per node where the label and the KV entry disagree with vCenter: {node: (label, kv)}.
    The KV is read as the read-only `cli` identity (a connection name on a `NatsServer`)."""
    truth = await asyncio.to_thread(vcenter_truth, admin)
    async with nats.connection("cli") as bus:
        store = await bus.topology()
        wrong = {}
        for node in NODES:
            placement = await store.get_node(node)
            label = node_labels(kube, node).get(LABEL_ESXI_HOST, "")
            stored = placement.host_name if placement is not None else None
            if (label, stored) != (truth[node], truth[node]):
                wrong[node] = (label, stored)
        return wrong


async def converges(
    kube: KubeDouble, admin: vim.ServiceInstance, nats: NatsServer | NatsCluster
) -> float:
    """Seconds until every label and KV entry equals vCenter's truth; fails after 30 s."""
    started = time.monotonic()
    while wrong := await truth_everywhere(kube, admin, nats):
        assert time.monotonic() - started < RECOVERY_SECONDS, f"not converged: {wrong}"
        await asyncio.sleep(0.2)
    return time.monotonic() - started


@contextlib.contextmanager
def watching_default_collector(si: vim.ServiceInstance) -> Iterator[None]:
    """Another client's WaitForUpdatesEx loop on its session's default PropertyCollector (every
    VM's `runtime.host`), kept going on a thread while the body runs."""
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    collector: Any = vmodl.query.PropertyCollector
    spec = collector.FilterSpec(
        objectSet=[
            collector.ObjectSpec(
                obj=view,
                skip=True,
                selectSet=[collector.TraversalSpec(path="view", type=vim.view.ContainerView)],
            )
        ],
        propSet=[collector.PropertySpec(type=vim.VirtualMachine, pathSet=["runtime.host"])],
    )
    content.propertyCollector.CreateFilter(spec, partialUpdates=False)
    with updates_followed(content.propertyCollector):
        yield
