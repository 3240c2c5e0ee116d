"""The node-labeller's work while its replica holds the Lease (the runner does the rest).

Start-up order: the topology KV read whole (so a restart only publishes what changed), then one
vCenter watch per configured vCenter and the batches each delivers, the Node informer, the
reconcile workers, the periodic resync and (with `failure_domains` categories) each vCenter's
tag reads, side by side until cancelled.

Readiness (declared up front in the spec, `readiness_parts`): "labelling done" once the first
complete labelling is done (it stays so: later work queued or retried is the service working, not
unready); per vCenter "vcenter read: <name>" once it was read whole (nodes wait for every vCenter),
and "vcenter connected: <name>" while its watch is up: with several vCenters one away is degraded
while another is served, not "not ready" for all.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import Error as NatsError

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.core.inventory import watched_properties
from hostaffinity.node_labeller.core.nodes import Node
from hostaffinity.node_labeller.core.reconcile import PlannerSettings
from hostaffinity.node_labeller.labeller import Labeller, Retry
from hostaffinity.node_labeller.metrics import LabellerMetrics
from hostaffinity.node_labeller.tag_refresh import refresh_tags_forever
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher
from hostaffinity.runtime.bus.layout import TOPOLOGY_STREAM
from hostaffinity.runtime.kube.client import NODES
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.informer import Informer, InformerEvent, msgspec_decoder
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.runner import VCENTER_CONNECTED, ServiceContext, vcenter_part
from hostaffinity.schema import EVENTS_STREAM

log = logging.getLogger(__name__)
T = TypeVar("T")
LABELLING_DONE = "labelling done"
READ = "vcenter read"


def readiness_parts(config: NodeLabellerConfig) -> list[str]:
    """Every part of /readyz the work adds (the spec declares them up front)."""
    names = [vcenter.known_as for vcenter in config.vcenters]
    per_vcenter = [vcenter_part(part, name) for part in (READ, VCENTER_CONNECTED) for name in names]
    return [LABELLING_DONE, *per_vcenter]


class NodeLabellerWork:
    """Labels nodes until cancelled; its parts stay visible for readiness and tests."""

    def __init__(self) -> None:
        self.labeller: Labeller | None = None
        self.informer: Informer[Node] | None = None
        self.watchers: list[InventoryWatcher] = []
        self._labelled_once = False

    def ready(self) -> bool:
        """Ready once the first complete labelling is done, and from then on."""
        labeller, informer = self.labeller, self.informer
        self._labelled_once = self._labelled_once or (
            labeller is not None
            and informer is not None
            and labeller.inventory_synced.is_set()
            and informer.synced.is_set()
            and labeller.idle()
        )
        return self._labelled_once

    async def __call__(self, ctx: ServiceContext[NodeLabellerConfig]) -> None:
        log.info("%s leads; labelling nodes", ctx.identity)
        config = ctx.config
        ctx.add_readiness(LABELLING_DONE, self.ready)
        properties = watched_properties(
            guest_hostname=config.labeller.match_fallback == "guest-hostname"
        )
        self.watchers = [InventoryWatcher(vcenter, properties) for vcenter in config.vcenters]
        for watcher in self.watchers:
            name = watcher.vcenter
            ctx.add_readiness(vcenter_part(READ, name), self._read_once(name))
            ctx.add_readiness(
                vcenter_part(VCENTER_CONNECTED, name),
                watcher.following,
                vcenter=name,
                detail=watcher.away,
            )
        await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, EVENTS_STREAM])
        store = await ctx.bus.topology()

        async def on_node(event: InformerEvent[Node]) -> None:
            labeller.on_node(event.key)

        informer = self.informer = Informer(ctx.kube, NODES, on_node, msgspec_decoder(Node))
        own = config.labeller
        labeller = Labeller(
            PlannerSettings(
                fallback=own.match_fallback,
                legacy_host_label=config.shared.legacy_host_label,
                failure_domains=config.failure_domains,
            ),
            ctx.kube,
            store,
            ctx.bus.publish_event,
            EventRecorder(ctx.kube, ctx.program, ctx.identity),
            informer,
            vcenters=[watcher.vcenter for watcher in self.watchers],
            event_factory=ctx.event_factory,
            metrics=LabellerMetrics(),
            workers=own.patch_concurrency,
            retry=Retry(own.retry_base_seconds, own.retry_max_seconds),
        )
        labeller.load_topology(await until_answered(store.snapshot, own.retry_max_seconds))
        labeller.restore_unpublished(await until_answered(store.unpublished, own.retry_max_seconds))
        self.labeller = labeller
        for watcher in self.watchers:
            ctx.start(watcher.run(), name=f"vcenter-watch {watcher.vcenter}")
            ctx.start(
                _apply_batches(watcher, labeller), name=f"inventory-batches {watcher.vcenter}"
            )
        ctx.start(labeller.run(), name="reconcile-workers")
        if config.failure_domains.enabled:
            for vcenter in config.vcenters:
                ctx.start(
                    refresh_tags_forever(vcenter, config.failure_domains, labeller),
                    name=f"vcenter-tags {vcenter.known_as}",
                )
        ctx.start(labeller.resync_forever(own.resync_seconds, self._read_all_again), name="resync")
        await informer.run()

    def _read_once(self, vcenter: str) -> Callable[[], bool]:
        """Readiness of one vCenter: its inventory has been read whole at least once."""
        return lambda: self.labeller is not None and self.labeller.read_once(vcenter)

    def _read_all_again(self) -> None:
        for watcher in self.watchers:
            watcher.request_full_read()


async def until_answered(read: Callable[[], Awaitable[T]], retry_seconds: float) -> T:
    """What the topology bucket holds, to start from; asked again while the bus does not answer
    (a NATS server killed, a stream leader being elected): failing the work for it would only
    restart the process. The fault campaign found it: a replica that took the Lease as a server
    of the cluster was killed exited 1 with `nats: timeout` from this read."""
    while True:
        try:
            return await read()
        except NatsError as error:
            log.warning(
                "the topology bucket did not answer (%r); asking again in %.0f s",
                error,
                retry_seconds,
            )
        raise_if_cancel_requested()  # a NATS call may have swallowed it
        await asyncio.sleep(retry_seconds)


async def _apply_batches(watcher: InventoryWatcher, labeller: Labeller) -> None:
    while True:
        batch = await watcher.batches.get()
        labeller.on_inventory(batch)
