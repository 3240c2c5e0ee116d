"""The node-labeller's working state and the edge where decisions become writes.

It joins the two streams of facts (vCenter inventory batches, Kubernetes Node events) into one
work queue keyed by topology KV key (`node.<name>`, `host.<moid>`). Workers ask the planner
(reconcile.py) what a key needs *now* and apply the answer in the order the design fixes:
topology KV, then the label patch, then events; warnings become Kubernetes Event series.

It converges by construction, not by the next change: a write that fails (KV, label patch,
event publish) sends the key back to the queue with backoff, and the retry plans afresh from
the current state, so it stops when it succeeds or applies a newer desired state. Events of a
stored change that were not published yet are kept per node until they are. A periodic resync
re-reads vCenter and the whole KV, marks every key whose stored value is not what was last
written (garbage, a false placement, a deleted node's key) for rewriting, and queues every key.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException
from opentelemetry.metrics import Observation

from hostaffinity.node_labeller.inventory import HOST, Inventory
from hostaffinity.node_labeller.metrics import LabellerMetrics
from hostaffinity.node_labeller.nodes import Node
from hostaffinity.node_labeller.reconcile import (
    NO_TAGS,
    NodeActions,
    PlannerSettings,
    Tags,
    forget_node,
    reconcile_host,
    reconcile_node,
    stale_keys,
)
from hostaffinity.node_labeller.vcenter_watch import UpdateBatch
from hostaffinity.runtime.bus.kv import TopologySnapshot, TopologyStore
from hostaffinity.runtime.bus.outbox_metrics import OutboxInstruments
from hostaffinity.runtime.kube.client import NODES, KubeClient
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.process.workqueue import WorkQueue
from hostaffinity.schema import (
    EsxiHost,
    Event,
    NodePlacement,
    NodeUnmatched,
    host_key,
    node_key,
    utc_timestamp,
)
from hostaffinity.schema.names import HOST_KEY_PREFIX, NODE_KEY_PREFIX

log = logging.getLogger(__name__)
Publish = Callable[[Event], Awaitable[object]]
# How long the first labelling waits for vCenter's tags before it labels without zones (they
# follow with the read).
FIRST_TAG_READ_WAIT_SECONDS: Final = 10.0


class NodeSource(Protocol):
    """Where the labeller reads Nodes: the informer's cache, complete once `synced` is set."""

    @property
    def cache(self) -> Mapping[str, Node]: ...

    @property
    def synced(self) -> asyncio.Event: ...


@dataclass(frozen=True, slots=True)
class Retry:
    """Backoff of a key whose writes failed: base * 2**failures, capped."""

    base_seconds: float = 0.05
    max_seconds: float = 10.0


DEFAULT_RETRY = Retry()


@dataclass(slots=True)
class Timing:
    """Where the time of one node's update went (for the latency benchmark)."""

    seen: float
    patch_sent: float = 0.0
    patch_answered: float = 0.0


@dataclass(slots=True)
class LabellerState:
    """What the labeller knows of vCenter, and what it last wrote to the KV."""

    inventory: Inventory = field(default_factory=Inventory)
    placements: dict[str, NodePlacement] = field(default_factory=dict)
    hosts: dict[str, EsxiHost] = field(default_factory=dict)
    node_of_vm: dict[str, str] = field(default_factory=dict)
    version: int = 0
    # vCenter's tags, for failure domains (read apart from the inventory: see tag_refresh.py).
    tags: Tags = NO_TAGS


class Labeller:
    """Plans and applies the writes of each queued key; one worker per key at a time."""

    def __init__(
        self,
        settings: PlannerSettings,
        kube: KubeClient,
        store: TopologyStore,
        publish: Publish,
        recorder: EventRecorder,
        nodes: NodeSource,
        *,
        workers: int = 32,
        retry: Retry = DEFAULT_RETRY,
    ) -> None:
        self.settings = settings
        self.state = LabellerState()
        self._kube = kube
        self._store = store
        self._publish = publish
        self._recorder = recorder
        self._nodes = nodes
        self._workers = workers
        self.queue: WorkQueue[str] = WorkQueue(
            "node-labeller", base_delay=retry.base_seconds, max_delay=retry.max_seconds
        )
        # Keys a resync found not holding what was written; cleared when rewritten.
        self._stale: set[str] = set()
        # Events of stored changes not yet published, per node, by id (in order): the labeller's
        # outbox, counted as every publisher's is.
        self._unpublished: dict[str, dict[str, Event]] = {}
        self._outbox = OutboxInstruments("node-labeller")
        # The NodeUnmatched id announced per unplaced node, so a resync does not repeat it.
        self._unmatched: dict[str, str] = {}
        self._working = False
        self.inventory_synced = asyncio.Event()
        # Set once vCenter's tags were read, or could not be (or are not needed): the first
        # labelling waits for it, so that zones come with the first patch.
        self.tags_tried = asyncio.Event()
        if not settings.failure_domains.enabled:
            self.tags_tried.set()
        self.timings: dict[str, Timing] = {}
        self.resyncs = 0
        # Complete vCenter inventories applied: the first, one per re-login and per resync.
        self.inventory_reads = 0
        self._metrics = LabellerMetrics(self.node_states)

    def node_states(self) -> list[Observation]:
        """How many known Nodes are placed, unmatched or pending, for the nodes gauge."""
        names = self._nodes.cache.keys()
        placed = sum(1 for name in names if name in self.state.placements)
        unmatched = sum(
            1 for name in names if name in self._unmatched and name not in self.state.placements
        )
        pending = len(names) - placed - unmatched
        counts = {"placed": placed, "unmatched": unmatched, "pending": pending}
        return [Observation(count, {"state": state}) for state, count in counts.items()]

    def idle(self) -> bool:
        """Working, and every queued key is done: nothing queued, running or waiting to retry."""
        return self._working and self.queue.idle()

    def load_topology(self, stored: TopologySnapshot) -> None:
        """Start from what the KV holds, so a restart publishes only what changed. A value that
        does not decode, or names another node, is left out: the first resync rewrites it."""
        for node, placement in stored.nodes.items():
            if isinstance(placement, NodePlacement) and placement.node == node:
                self.state.placements[node] = placement
                self.state.node_of_vm[placement.vm_moid] = placement.node
                self.state.version = max(self.state.version, placement.version)
        self.state.hosts.update(
            (moid, host)
            for moid, host in stored.hosts.items()
            if isinstance(host, EsxiHost) and host.moid == moid
        )

    async def run(self) -> None:
        """Work the queue until cancelled, once vCenter's inventory and the Nodes are known
        (before that, a Node missing from a partial cache would look deleted)."""
        await self.inventory_synced.wait()
        await self._nodes.synced.wait()
        with contextlib.suppress(TimeoutError):  # a slow tag API never holds host labels back
            await asyncio.wait_for(self.tags_tried.wait(), FIRST_TAG_READ_WAIT_SECONDS)
        self._queue_everything()
        self._working = True
        await self.queue.run(self._reconcile_key, self._workers)

    async def resync_forever(self, interval: float, read_vcenter_again: Callable[[], None]) -> None:
        """Every `interval`: have vCenter's inventory read whole again, and `resync`."""
        while True:
            await asyncio.sleep(interval)
            if not self._working:
                continue
            read_vcenter_again()
            try:
                await self.resync()
            except Exception as error:  # NATS away: the next resync tries again
                log.warning("resync failed (%r); next in %.0fs", error, interval)
            raise_if_cancel_requested()  # a NATS call may have swallowed it

    async def resync(self) -> None:
        """Compare the KV with what was written, mark what differs for rewriting, queue all."""
        candidates = stale_keys(
            await self._store.snapshot(), self.state.placements, self.state.hosts
        )
        stale = {key for key in candidates if await self._still_differs(key)}
        for key in sorted(stale - self._stale):
            log.warning("topology key %s does not hold what was written; rewriting it", key)
            self._metrics.repaired()
        self._stale |= stale
        self._queue_everything()
        self.resyncs += 1

    async def _still_differs(self, key: str) -> bool:
        """A key the snapshot says differs, read again on its own: a watch-based snapshot can
        miss keys, and a worker may have written the key since."""
        try:
            if key.startswith(NODE_KEY_PREFIX):
                node = key.removeprefix(NODE_KEY_PREFIX)
                return await self._store.get_node(node) != self.state.placements.get(node)
            moid = key.removeprefix(HOST_KEY_PREFIX)
            return await self._store.get_host(moid) != self.state.hosts.get(moid)
        except msgspec.DecodeError:
            return True

    def on_inventory(self, batch: UpdateBatch) -> None:
        """Apply one vCenter batch and queue every key it may have changed."""
        if batch.resync:
            self.state.inventory = Inventory()
            self.inventory_reads += 1
        affected_vms: set[str] = set()
        hosts: set[str] = set()
        everything = batch.resync
        for update in batch.updates:
            inventory = self.state.inventory
            task_host = inventory.host_of_task(update.moid)  # before a task leaves
            touched = inventory.apply(update)
            if touched is None:  # a cluster, folder or datacenter: any host may have moved
                everything = True
            else:
                affected_vms |= touched
            if update.obj_type == HOST:
                hosts.add(update.moid)
            hosts.update(h for h in (task_host, inventory.host_of_task(update.moid)) if h)
        if everything:
            nodes = self._queue_everything()
        else:
            mapped = self.state.node_of_vm
            nodes = {mapped[vm] for vm in affected_vms if vm in mapped} | self._unplaced_nodes()
            self._queue(nodes, hosts)
        for name in nodes:
            self.timings[name] = Timing(seen=batch.received_at)
        self.inventory_synced.set()

    def on_tags(self, tags: Tags | None) -> None:
        """vCenter's tags were read (None: they could not be, the last read stands); a change
        re-examines every node and host, since any host's domains may have changed."""
        self.tags_tried.set()
        if tags is None or tags == self.state.tags:
            return
        self.state.tags = tags
        if self._working:
            self._queue_everything()

    def on_node(self, name: str) -> None:
        """A Node was added, changed (perhaps a hand-edited label) or deleted."""
        self.queue.add(node_key(name))

    def _queue(self, nodes: Iterable[str], hosts: Iterable[str]) -> None:
        for name in nodes:
            self.queue.add(node_key(name))
        for moid in hosts:
            self.queue.add(host_key(moid))

    def _queue_everything(self) -> set[str]:
        """Queue every node and host vCenter, Kubernetes or the KV knows; returns the nodes."""
        nodes = set(self._nodes.cache) | set(self.state.placements)
        self._queue(nodes, set(self.state.inventory.host_moids()) | set(self.state.hosts))
        for key in self._stale:
            self.queue.add(key)
        return nodes

    def _unplaced_nodes(self) -> set[str]:
        return {name for name in self._nodes.cache if name not in self.state.placements}

    async def _reconcile_key(self, key: str) -> None:
        stale = key in self._stale
        self._stale.discard(key)  # a resync meanwhile marks it again, for the next round
        try:
            if key.startswith(NODE_KEY_PREFIX):
                await self._reconcile_node(key.removeprefix(NODE_KEY_PREFIX), stale)
            else:
                await self._reconcile_host(key.removeprefix(HOST_KEY_PREFIX), stale)
        except BaseException:
            if stale:
                self._stale.add(key)
            raise

    async def _reconcile_node(self, name: str, kv_stale: bool) -> None:
        node = self._nodes.cache.get(name)
        previous = self.state.placements.get(name)
        if node is None:
            actions = forget_node(name, previous, kv_stale=kv_stale)
        else:
            actions = reconcile_node(
                node,
                self.state.inventory,
                previous,
                self.settings,
                now=utc_timestamp(),
                version=self.state.version + 1,
                kv_stale=kv_stale,
                tags=self.state.tags,
            )
        await self._apply(node, actions)

    async def _reconcile_host(self, moid: str, kv_stale: bool) -> None:
        previous = self.state.hosts.get(moid)
        inventory = self.state.inventory
        domains = self.state.tags.domains(moid, inventory, self.settings)
        actions = reconcile_host(moid, inventory, previous, kv_stale=kv_stale, domains=domains)
        if actions.put is not None:
            await self._store.put_host(actions.put)
            self.state.hosts[moid] = actions.put
        elif actions.delete:
            await self._store.delete_host(moid)
            self.state.hosts.pop(moid, None)

    async def _apply(self, node: Node | None, actions: NodeActions) -> None:
        """KV, then labels, then events; raises at the first failed write (the key is retried)."""
        name = actions.node
        await self._write_placement(actions)
        unpublished = self._unpublished.setdefault(name, {})
        for event in actions.events:
            if isinstance(event, NodeUnmatched):
                if self._unmatched.get(name) == event.id:
                    continue  # announced already; the warning Event series counts repeats
                self._unmatched[name] = event.id
            if event.id not in unpublished:
                unpublished[event.id] = event
                self._outbox.queued(1)
        if actions.label_patch is not None:
            await self._patch(name, actions.label_patch)
        while unpublished:
            event_id, event = next(iter(unpublished.items()))
            await self._publish(event)
            del unpublished[event_id]
            self._outbox.queued(-1)
        del self._unpublished[name]
        if node is not None:
            for warning in actions.warnings:
                await self._report(node, warning.reason, warning.message)

    async def _write_placement(self, actions: NodeActions) -> None:
        name = actions.node
        if actions.placement is not None:
            self.state.version = max(self.state.version, actions.placement.version)
            await self._store.put_node(actions.placement)
            self.state.placements[name] = actions.placement
            self.state.node_of_vm[actions.placement.vm_moid] = name
            self._unmatched.pop(name, None)
        elif actions.delete_placement:
            await self._store.delete_node(name)
            gone = self.state.placements.pop(name, None)
            if gone is not None and self.state.node_of_vm.get(gone.vm_moid) == name:
                del self.state.node_of_vm[gone.vm_moid]
        if name not in self._nodes.cache:
            self._unmatched.pop(name, None)

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
        if timing is None:
            self._metrics.patched(None)
        else:
            timing.patch_answered = time.monotonic()
            self._metrics.patched(timing.patch_answered - timing.seen)

    async def _report(self, node: Node, reason: str, message: str) -> None:
        """Every occurrence counts towards the node's Event series; the recorder bounds the
        writes, and the log says only what it wrote."""
        self._metrics.warned(reason)
        about = ObjectRef(kind="Node", name=node.name, uid=node.metadata.uid)
        if await self._recorder.record(about, reason, message):
            log.warning("node %s: %s: %s", node.name, reason, message)
