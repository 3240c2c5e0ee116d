"""The node-labeller's working state and the edge where decisions become writes.

It joins the two streams of facts (vCenter inventory batches, Kubernetes Node events), asks
`reconcile_node` what each affected node needs, and applies the answer in the order the design
fixes: topology KV, then the label patch, then events; warnings become Kubernetes Events.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from kubernetes_asyncio.client.exceptions import ApiException
from opentelemetry import metrics

from hostaffinity.node_labeller.inventory import Inventory
from hostaffinity.node_labeller.nodes import Node
from hostaffinity.node_labeller.reconcile import NodeActions, Settings, reconcile_node
from hostaffinity.node_labeller.vcenter_watch import UpdateBatch
from hostaffinity.runtime.kube import NODES, KubeClient
from hostaffinity.runtime.kube_events import EventRecorder, ObjectRef
from hostaffinity.runtime.kv import TopologyStore
from hostaffinity.schema import EsxiHost, Event, NodePlacement, label_value, utc_timestamp

log = logging.getLogger(__name__)
_meter = metrics.get_meter("hostaffinity.node_labeller")
_patches = _meter.create_counter("node_labeller_label_patches", description="label patches sent")
_warnings = _meter.create_counter(
    "node_labeller_node_warnings", description="problems reported on nodes, by reason"
)
_patch_latency = _meter.create_histogram(
    "node_labeller_update_to_patch_seconds",
    unit="s",
    description="from a vCenter update arriving to its label patch being answered",
)

Publish = Callable[[Event], Awaitable[object]]


@dataclass(slots=True)
class Timing:
    """Where the time of one node's update went (for the latency benchmark)."""

    seen: float
    patch_sent: float = 0.0
    patch_answered: float = 0.0


@dataclass(slots=True)
class LabellerState:
    inventory: Inventory = field(default_factory=Inventory)
    nodes: dict[str, Node] = field(default_factory=dict)
    placements: dict[str, NodePlacement] = field(default_factory=dict)
    hosts: dict[str, EsxiHost] = field(default_factory=dict)
    node_of_vm: dict[str, str] = field(default_factory=dict)
    version: int = 0


class Labeller:
    """Applies reconcile decisions; one lock per node keeps a node's writes in order."""

    def __init__(
        self,
        settings: Settings,
        kube: KubeClient,
        store: TopologyStore,
        publish: Publish,
        recorder: EventRecorder,
        *,
        patch_concurrency: int = 32,
    ) -> None:
        self.settings = settings
        self.state = LabellerState()
        self._kube = kube
        self._store = store
        self._publish = publish
        self._recorder = recorder
        self._locks: dict[str, asyncio.Lock] = {}
        self._slots = asyncio.Semaphore(patch_concurrency)
        self._reported: set[tuple[str, str, str]] = set()
        self.inventory_synced = asyncio.Event()
        self.timings: dict[str, Timing] = {}
        self._in_flight = 0

    def idle(self) -> bool:
        """No node is being reconciled right now."""
        return self._in_flight == 0

    def load_topology(self, placements: Iterable[NodePlacement], hosts: Iterable[EsxiHost]) -> None:
        """Start from what the KV holds, so a restart publishes only what changed."""
        for placement in placements:
            self.state.placements[placement.node] = placement
            self.state.node_of_vm[placement.vm_moid] = placement.node
            self.state.version = max(self.state.version, placement.version)
        self.state.hosts.update((host.moid, host) for host in hosts)

    async def on_inventory(self, batch: UpdateBatch) -> None:
        """Apply one vCenter batch and bring every affected node up to date."""
        if batch.resync:
            self.state.inventory = Inventory()
        affected_vms: set[str] | None = set()
        for update in batch.updates:
            touched = self.state.inventory.apply(update)
            if touched is None or affected_vms is None:
                affected_vms = None
            else:
                affected_vms |= touched
        await self._write_hosts()
        if batch.resync or affected_vms is None:
            nodes = set(self.state.nodes)
        else:
            mapped = self.state.node_of_vm
            nodes = {mapped[vm] for vm in affected_vms if vm in mapped} | self._unplaced_nodes()
        for name in nodes:
            self.timings[name] = Timing(seen=batch.received_at)
        self.inventory_synced.set()
        await self.reconcile(nodes)

    async def on_node(self, node: Node | None, name: str) -> None:
        """A Node was added, changed (perhaps a hand-edited label) or deleted."""
        if node is None:
            self.state.nodes.pop(name, None)
            if self.state.placements.pop(name, None) is not None:
                await self._store.delete_node(name)
            return
        self.state.nodes[name] = node
        if self.inventory_synced.is_set():
            await self.reconcile([name])

    async def reconcile(self, names: Iterable[str]) -> None:
        await asyncio.gather(*(self._reconcile_one(name) for name in names))

    def _unplaced_nodes(self) -> set[str]:
        return {name for name in self.state.nodes if name not in self.state.placements}

    async def _reconcile_one(self, name: str) -> None:
        lock = self._locks.setdefault(name, asyncio.Lock())
        self._in_flight += 1
        try:
            await self._reconcile_locked(name, lock)
        finally:
            self._in_flight -= 1

    async def _reconcile_locked(self, name: str, lock: asyncio.Lock) -> None:
        async with self._slots, lock:
            node = self.state.nodes.get(name)
            if node is None:
                return
            try:
                actions = reconcile_node(
                    node,
                    self.state.inventory,
                    self.state.placements.get(name),
                    self.settings,
                    now=utc_timestamp(),
                    version=self.state.version + 1,
                )
                await self._apply(node, actions)
            except Exception:  # one node's failure must not stop the others
                log.exception("reconciling node %s failed; it is retried on its next change", name)

    async def _apply(self, node: Node, actions: NodeActions) -> None:
        name = node.name
        if actions.placement is not None:
            self.state.version = max(self.state.version, actions.placement.version)
            await self._store.put_node(actions.placement)
            self.state.placements[name] = actions.placement
            self.state.node_of_vm[actions.placement.vm_moid] = name
        elif actions.delete_placement:
            gone = self.state.placements.pop(name, None)
            await self._store.delete_node(name)
            if gone is not None and self.state.node_of_vm.get(gone.vm_moid) == name:
                del self.state.node_of_vm[gone.vm_moid]
        if actions.label_patch is not None:
            await self._patch(name, actions.label_patch)
        for event in actions.events:
            await self._publish(event)
        for warning in actions.warnings:
            await self._report(node, warning.reason, warning.message)

    async def _patch(self, name: str, patch: dict[str, dict[str, str | None]]) -> None:
        timing = self.timings.get(name)
        if timing is not None:
            timing.patch_sent = time.monotonic()
        try:
            await self._kube.request(
                "PATCH",
                NODES.path(name),
                body={"metadata": patch},
                content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status == 404:
                return  # deleted meanwhile; its DELETED event cleans up
            raise
        _patches.add(1)
        if timing is not None:
            timing.patch_answered = time.monotonic()
            _patch_latency.record(timing.patch_answered - timing.seen)

    async def _report(self, node: Node, reason: str, message: str) -> None:
        key = (node.name, reason, message)
        if key in self._reported:
            return
        self._reported.add(key)
        _warnings.add(1, {"reason": reason})
        log.warning("node %s: %s: %s", node.name, reason, message)
        about = ObjectRef(kind="Node", name=node.name, uid=node.metadata.uid)
        await self._recorder.record(about, reason, message)

    async def _write_hosts(self) -> None:
        inventory = self.state.inventory
        for moid in inventory.host_moids():
            facts = inventory.host(moid)
            if facts is None:
                continue
            host = EsxiHost(
                moid=moid,
                name=facts.name,
                label=label_value(facts.name),
                cluster_moid=facts.cluster_moid,
                cluster_name=facts.cluster_name,
                datacenter=facts.datacenter,
                connection_state=facts.connection_state,
                in_maintenance_mode=facts.in_maintenance_mode,
            )
            if self.state.hosts.get(moid) != host:
                await self._store.put_host(host)
                self.state.hosts[moid] = host
        for moid in set(self.state.hosts) - set(inventory.host_moids()):
            await self._store.delete_host(moid)
            del self.state.hosts[moid]
