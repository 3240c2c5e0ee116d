"""The node-labeller's working state and the edge where decisions become writes.

It joins the two streams of facts (each vCenter's inventory batches, Kubernetes Node events)
into one work queue keyed by topology KV key (`node.<name>`, `host.<host-id>`: the host's moid
with one vCenter, `<vcenter>.<moid>` with several, since moids repeat across vCenters). Workers
ask the planner (reconcile.py) what a key needs *now* and apply the answer in the order the
design fixes: topology KV, then the label patch, then events; warnings become Kubernetes Event
series.

It converges by construction, not by the next change: a write that fails (KV, label patch,
event publish) sends the key back to the queue with backoff, and the retry plans afresh from
the current state, so it stops when it succeeds or applies a newer desired state. Events of a
stored change that were not published yet are kept per node until they are. A periodic resync
re-reads vCenter and the whole KV, marks every key whose stored value is not what was last
written (garbage, a false placement, a deleted node's key) for rewriting, and queues every key.

Nodes wait until every vCenter's inventory has been read once: before that a node's VM may be in
a vCenter not read yet (or its BIOS UUID in two), and nothing is guessed. Afterwards a vCenter
whose watch fails keeps its last inventory while its watcher reconnects, and the others go on.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException
from opentelemetry.metrics import Observation

from hostaffinity.node_labeller.config import LabellerSettings
from hostaffinity.node_labeller.core.inventory import HOST, VM, Inventory
from hostaffinity.node_labeller.core.matching import MatchKey, vm_match_keys
from hostaffinity.node_labeller.core.node_index import NodeIndex
from hostaffinity.node_labeller.core.nodes import Node
from hostaffinity.node_labeller.core.reconcile import (
    NO_TAGS,
    NodeActions,
    PlannerSettings,
    Tags,
    forget_node,
    reconcile_host,
    reconcile_node,
    stale_keys,
)
from hostaffinity.node_labeller.metrics import LabellerMetrics
from hostaffinity.node_labeller.vcenter_watch import UpdateBatch
from hostaffinity.runtime.bus.kv import TopologyStore
from hostaffinity.runtime.bus.outbox_metrics import OutboxInstruments
from hostaffinity.runtime.kube.client import NODES, KubeClient
from hostaffinity.runtime.kube.events import EventRecorder, ObjectRef
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested, wait_set
from hostaffinity.runtime.process.checkpoints import WritePath
from hostaffinity.runtime.process.workqueue import WorkQueue
from hostaffinity.schema import (
    EsxiHost,
    Event,
    EventFactory,
    NodeLabelled,
    NodePlaced,
    NodePlacement,
    NodeUnmatched,
    TopologySnapshot,
    VmMoved,
    host_id,
    host_key,
    node_key,
    utc_timestamp,
)
from hostaffinity.schema.names import HOST_KEY_PREFIX, NODE_KEY_PREFIX

log = logging.getLogger(__name__)
# Where a caller names none (tests), the config's own defaults.
_DEFAULTS = LabellerSettings()
Publish = Callable[[Event], Awaitable[object]]
# A node's writes, between their awaits (test-only kill points: runtime checkpoints.py).
LABEL_PATH: Final = WritePath(
    "label",
    (
        "planned",
        "events-kept",
        "kv-written",
        "labels-patched",
        "event-published",
        "events-forgotten",
    ),
)
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

    base_seconds: float = _DEFAULTS.retry_base_seconds
    max_seconds: float = _DEFAULTS.retry_max_seconds


DEFAULT_RETRY = Retry()


@dataclass(slots=True)
class Timing:
    """Where the time of one node's update went (for the latency benchmark)."""

    seen: float
    patch_sent: float = 0.0
    patch_answered: float = 0.0


@dataclass(frozen=True, slots=True)
class HostIds:
    """What follows `host.` in the KV key of each vCenter's hosts (schema `host_id`): the bare
    moid with one vCenter (the documented layout), `<vcenter>.<moid>` with several."""

    vcenters: tuple[str, ...]

    def of(self, vcenter: str, moid: str) -> str:
        return host_id(moid, vcenter if len(self.vcenters) > 1 else None)

    def parse(self, key_part: str) -> tuple[str, str] | None:
        """(vcenter, moid) of a host id; None for one no configured vCenter writes."""
        for vcenter in self.vcenters:
            moid = key_part.removeprefix(self.of(vcenter, ""))
            if moid and "." not in moid and self.of(vcenter, moid) == key_part:
                return vcenter, moid
        return None


@dataclass(slots=True)
class LabellerState:
    """What the labeller knows of each vCenter (by name), and what it last wrote to the KV."""

    inventories: dict[str, Inventory] = field(default_factory=dict)
    placements: dict[str, NodePlacement] = field(default_factory=dict)
    # By host id (`HostIds`), as the KV keys them.
    hosts: dict[str, EsxiHost] = field(default_factory=dict)
    # (vcenter, VM moid) → node.
    node_of_vm: dict[tuple[str, str], str] = field(default_factory=dict)
    version: int = 0
    # Each vCenter's tags, for failure domains (read apart from the inventory: see
    # tag_refresh.py), by vCenter name.
    tags: dict[str, Tags] = field(default_factory=dict)


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
        vcenters: Sequence[str],
        event_factory: EventFactory,
        metrics: LabellerMetrics,
        workers: int = _DEFAULTS.patch_concurrency,
        retry: Retry = DEFAULT_RETRY,
    ) -> None:
        self.settings = settings
        self._event_factory = event_factory
        self.state = LabellerState()
        self.host_ids = HostIds(tuple(vcenters))
        self._kube = kube
        self._store = store
        self._publish = publish
        self._recorder = recorder
        self._nodes = nodes
        # The Nodes by what their VM is matched by: which nodes a changed VM may concern.
        self._node_index = NodeIndex(settings.fallback)
        self._workers = workers
        self.queue: WorkQueue[str] = WorkQueue(
            "node-labeller", base_delay=retry.base_seconds, max_delay=retry.max_seconds
        )
        # Keys a resync found not holding what was written; cleared when rewritten.
        self._stale: set[str] = set()
        # Events of stored changes not yet published, per node, by id (in order): the labeller's
        # outbox, counted as every publisher's is.
        self._unpublished: dict[str, dict[str, Event]] = {}
        # Per node, the ids of its events kept in the topology bucket until published (an
        # empty set: kept events of an earlier run that were dropped, their key to be deleted).
        self._kept: dict[str, set[str]] = {}
        self._outbox = OutboxInstruments("node-labeller")
        # The NodeUnmatched id announced per unplaced node, so a resync does not repeat it.
        self._unmatched: dict[str, str] = {}
        self._working = False
        # Set once every vCenter's inventory has been read whole (`read_once` says which were).
        self.inventory_synced = asyncio.Event()
        # Set once every vCenter's tags were read, or could not be (or are not needed): the
        # first labelling waits for it, so that zones come with the first patch.
        self.tags_tried = asyncio.Event()
        self._tags_tried_in: set[str] = set()
        if not settings.failure_domains.enabled:
            self.tags_tried.set()
        self._first_inventory = asyncio.Event()
        self.timings: dict[str, Timing] = {}
        self.resyncs = 0
        # Complete vCenter inventories applied: the first, one per re-login and per resync.
        self.inventory_reads = 0
        self._metrics = metrics
        metrics.count_nodes(self.node_states)

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

    def read_once(self, vcenter: str) -> bool:
        """This vCenter's inventory has been read whole at least once."""
        return vcenter in self.state.inventories

    def idle(self) -> bool:
        """Working, and every queued key is done: nothing queued, running or waiting to retry."""
        return self._working and self.queue.idle()

    def load_topology(self, stored: TopologySnapshot) -> None:
        """Start from what the KV holds, so a restart publishes only what changed. A value that
        does not decode, or names another node, is left out: the first resync rewrites it."""
        for node, placement in stored.nodes.items():
            if isinstance(placement, NodePlacement) and placement.node == node:
                self.state.placements[node] = placement
                self.state.node_of_vm[(placement.vcenter, placement.vm_moid)] = placement.node
                self.state.version = max(self.state.version, placement.version)
        self.state.hosts.update(
            (key_part, host)
            for key_part, host in stored.hosts.items()
            if isinstance(host, EsxiHost) and self.host_ids.of(host.vcenter, host.moid) == key_part
        )

    def restore_unpublished(self, kept: Mapping[str, Sequence[Event]]) -> None:
        """Take back the events an earlier run kept and did not publish (after `load_topology`):
        those describing what the KV holds are published by the node's next reconcile, once its
        labels are right; the others describe a change that run never stored, planned again."""
        for name, events in kept.items():
            placement = self.state.placements.get(name)
            stored = {e.id: e for e in events if _describes(e, placement)}
            if len(stored) < len(events):
                log.info(
                    "node %s: %d kept events of a change never stored dropped",
                    name,
                    len(events) - len(stored),
                )
            self._unpublished[name] = stored
            self._outbox.queued(len(stored))
            self._kept[name] = set(stored)
            for event in stored.values():
                if isinstance(event, NodeUnmatched):
                    self._unmatched[name] = event.id

    async def run(self) -> None:
        """Work the queue until cancelled, once a vCenter's inventory and the Nodes are known
        (before that, a Node missing from a partial cache would look deleted); nodes wait for
        every vCenter (`_reconcile_key`)."""
        await self._first_inventory.wait()
        await self._nodes.synced.wait()
        # A slow tag API never holds host labels back.
        await wait_set(self.tags_tried, FIRST_TAG_READ_WAIT_SECONDS)
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
        """Apply one batch of one vCenter and queue every key it may have changed: the nodes
        placed on the VMs it touched, and the nodes those VMs could be (or could have been)
        the VM of, by their BIOS UUID, name or guest hostname before and after the change
        (a VM appearing for a node not placed yet, or a twin of a placed node's VM)."""
        vcenter = batch.vcenter
        previous = self.state.inventories.get(vcenter)
        if batch.resync:
            self.state.inventories[vcenter] = Inventory(batch.vcenter_uuid)
            self.inventory_reads += 1
        inventory = self.state.inventories.setdefault(vcenter, Inventory())
        affected_vms: set[str] = set()
        match_keys: set[MatchKey] = set()
        hosts: set[str] = set()
        everything = batch.resync
        for update in batch.updates:
            task_host = inventory.host_of_task(update.moid)  # before a task leaves
            if update.obj_type == VM and (before := inventory.vm(update.moid)) is not None:
                match_keys |= vm_match_keys(before)  # the node it was found by may lose it
            touched = inventory.apply(update)
            if touched is None:  # a cluster, folder or datacenter: any host may have moved
                everything = True
            else:
                affected_vms |= touched
            if update.obj_type == HOST:
                hosts.add(self.host_ids.of(vcenter, update.moid))
            hosts.update(
                self.host_ids.of(vcenter, h)
                for h in (task_host, inventory.host_of_task(update.moid))
                if h
            )
        if everything:
            if batch.resync and previous is not None:  # what it found changed goes first
                moved = {vm for vm in affected_vms if inventory.vm(vm) != previous.vm(vm)}
                self._queue(
                    self._nodes_concerned(vcenter, inventory, moved, set()),
                    {
                        self.host_ids.of(vcenter, moid)
                        for moid in inventory.host_moids()
                        if inventory.host(moid) != previous.host(moid)
                    },
                )
            nodes = self._queue_everything()
        else:
            nodes = self._nodes_concerned(vcenter, inventory, affected_vms, match_keys)
            self._queue(nodes, hosts)
        for name in nodes:
            self.timings[name] = Timing(seen=batch.received_at)
        self._first_inventory.set()
        if all(self.read_once(name) for name in self.host_ids.vcenters):
            self.inventory_synced.set()

    def _nodes_concerned(
        self, vcenter: str, inventory: Inventory, vms: set[str], match_keys: set[MatchKey]
    ) -> set[str]:
        """The nodes placed on `vms` and those the VMs (or `match_keys`) may be the VM of."""
        mapped = self.state.node_of_vm
        placed = {mapped[(vcenter, vm)] for vm in vms if (vcenter, vm) in mapped}
        keys = set(match_keys)
        for vm in vms:
            if (facts := inventory.vm(vm)) is not None:
                keys |= vm_match_keys(facts)
        return placed | self._node_index.nodes_with(keys)

    def on_tags(self, vcenter: str, tags: Tags | None) -> None:
        """A vCenter's tags were read (None: they could not be, the last read stands); a change
        re-examines every node and host, since any host's domains may have changed."""
        self._tags_tried_in.add(vcenter)
        if self._tags_tried_in.issuperset(self.host_ids.vcenters):
            self.tags_tried.set()
        if tags is None or tags == self.state.tags.get(vcenter):
            return
        self.state.tags[vcenter] = tags
        if self._working:
            self._queue_everything()

    def on_node(self, name: str) -> None:
        """A Node was added, changed (perhaps a hand-edited label) or deleted."""
        self._node_index.update(name, self._nodes.cache.get(name))
        self.queue.add(node_key(name))

    def _queue(self, nodes: Iterable[str], hosts: Iterable[str]) -> None:
        """Queue nodes by name and hosts by host id."""
        for name in nodes:
            self.queue.add(node_key(name))
        for key_part in hosts:
            self.queue.add(host_key(key_part))

    def _queue_everything(self) -> set[str]:
        """Sweep every node and host vCenter, Kubernetes or the KV knows (keys a change queues
        meanwhile go first); returns the nodes."""
        nodes = set(self._nodes.cache) | set(self.state.placements) | set(self._kept)
        hosts = {
            self.host_ids.of(vcenter, moid)
            for vcenter, inventory in self.state.inventories.items()
            for moid in inventory.host_moids()
        }
        for key in self._stale:
            self.queue.add(key)
        self.queue.sweep(
            [
                *(node_key(name) for name in sorted(nodes)),
                *(host_key(part) for part in sorted(hosts | set(self.state.hosts))),
            ]
        )
        return nodes

    async def _reconcile_key(self, key: str) -> None:
        if key.startswith(NODE_KEY_PREFIX) and not self.inventory_synced.is_set():
            return  # queued again with everything once the last vCenter is read
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
                self.state.inventories,
                previous,
                self.settings,
                now=utc_timestamp(),
                version=self.state.version + 1,
                events=self._event_factory,
                kv_stale=kv_stale,
                tags=self.state.tags,
            )
        await self._apply(node, actions)

    async def _reconcile_host(self, key_part: str, kv_stale: bool) -> None:
        previous = self.state.hosts.get(key_part)
        parsed = self.host_ids.parse(key_part)
        if parsed is None:  # a key of another layout, or of a vCenter no longer configured
            actions = reconcile_host(key_part, "", None, previous, kv_stale=kv_stale)
        elif not self.read_once(parsed[0]):
            return  # its vCenter was not read yet: queued again with everything once it is
        else:
            vcenter, moid = parsed
            inventory = self.state.inventories[vcenter]
            tags = self.state.tags.get(vcenter, NO_TAGS)
            domains = tags.domains(moid, inventory, self.settings)
            actions = reconcile_host(
                moid, vcenter, inventory, previous, kv_stale=kv_stale, domains=domains
            )
        if actions.put is not None:
            await self._store.put_host(actions.put, key_part)
            self.state.hosts[key_part] = actions.put
        elif actions.delete:
            await self._store.delete_host(key_part)
            self.state.hosts.pop(key_part, None)

    async def _apply(self, node: Node | None, actions: NodeActions) -> None:
        """Events kept, KV, labels, events published; raises at the first failed write (the key
        is retried)."""
        name = actions.node
        if actions.writes():
            LABEL_PATH.checkpoint("planned")
        unpublished = self._unpublished.setdefault(name, {})
        for event in actions.events:
            if isinstance(event, NodeUnmatched):
                if self._unmatched.get(name) == event.id:
                    continue  # announced already; the warning Event series counts repeats
                self._unmatched[name] = event.id
            if event.id not in unpublished:
                unpublished[event.id] = event
                self._outbox.queued(1)
        if unpublished.keys() - self._kept.get(name, set()):
            # Before the change is made: a run stopped after it publishes them on restart.
            await self._store.keep_unpublished(name, list(unpublished.values()))
            self._kept[name] = set(unpublished)
            LABEL_PATH.checkpoint("events-kept")
        await self._write_placement(actions)
        if actions.label_patch is not None:
            await self._patch(name, actions.label_patch)
            LABEL_PATH.checkpoint("labels-patched")
        while unpublished:
            event_id, event = next(iter(unpublished.items()))
            await self._publish(event)
            LABEL_PATH.checkpoint("event-published")
            del unpublished[event_id]
            self._outbox.queued(-1)
        del self._unpublished[name]
        if name in self._kept:
            await self._store.forget_unpublished(name)
            del self._kept[name]
            LABEL_PATH.checkpoint("events-forgotten")
        if node is not None:
            for warning in actions.warnings:
                await self._report(node, warning.reason, warning.message)

    async def _write_placement(self, actions: NodeActions) -> None:
        name = actions.node
        if actions.placement is not None:
            self.state.version = max(self.state.version, actions.placement.version)
            await self._store.put_node(actions.placement)
            LABEL_PATH.checkpoint("kv-written")
            self.state.placements[name] = actions.placement
            self.state.node_of_vm[(actions.placement.vcenter, actions.placement.vm_moid)] = name
            self._unmatched.pop(name, None)
        elif actions.delete_placement:
            await self._store.delete_node(name)
            LABEL_PATH.checkpoint("kv-written")
            gone = self.state.placements.pop(name, None)
            if gone is not None and self.state.node_of_vm.get((gone.vcenter, gone.vm_moid)) == name:
                del self.state.node_of_vm[(gone.vcenter, gone.vm_moid)]
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


def _describes(event: Event, placement: NodePlacement | None) -> bool:
    """Whether a kept event describes the stored placement: an announced placement or labels
    of its version, or (unmatched) no placement at all."""
    if isinstance(event, NodeUnmatched):
        return placement is None
    if isinstance(event, NodePlaced | VmMoved | NodeLabelled):
        return placement is not None and placement.version == event.version
    return False
