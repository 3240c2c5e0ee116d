"""The node-labeller's work while its replica holds the Lease (the runner does the rest).

Start-up order: the topology KV read whole (so a restart only publishes what changed), then the
vCenter watch, the batches it delivers, the Node informer, the reconcile workers, the periodic
resync and (with `failure_domains` categories) the tag reads, side by side until cancelled.
"""

import logging

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.labeller import Labeller, Retry
from hostaffinity.node_labeller.nodes import Node
from hostaffinity.node_labeller.reconcile import PlannerSettings
from hostaffinity.node_labeller.tag_refresh import refresh_tags_forever
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher
from hostaffinity.runtime.bus.layout import TOPOLOGY_STREAM
from hostaffinity.runtime.kube.client import NODES
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.informer import Informer, InformerEvent, msgspec_decoder
from hostaffinity.runtime.runner import ServiceContext
from hostaffinity.schema import EVENTS_STREAM

log = logging.getLogger(__name__)


class NodeLabellerWork:
    """Labels nodes until cancelled; its parts stay visible for readiness and tests."""

    def __init__(self) -> None:
        self.labeller: Labeller | None = None
        self.informer: Informer[Node] | None = None
        self.watcher: InventoryWatcher | None = None

    def ready(self) -> bool:
        """Ready once the first complete labelling is done."""
        labeller, informer = self.labeller, self.informer
        return (
            labeller is not None
            and informer is not None
            and labeller.inventory_synced.is_set()
            and informer.synced.is_set()
            and labeller.idle()
        )

    async def __call__(self, ctx: ServiceContext[NodeLabellerConfig]) -> None:
        log.info("%s leads; labelling nodes", ctx.identity)
        config = ctx.config
        ctx.add_readiness("labelling done", self.ready)
        watcher = self.watcher = InventoryWatcher(config.vcenter)
        await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, EVENTS_STREAM])
        store = await ctx.bus.topology()

        async def on_node(event: InformerEvent[Node]) -> None:
            labeller.on_node(event.key)

        informer = self.informer = Informer(ctx.kube, NODES, on_node, msgspec_decoder(Node))
        labeller = Labeller(
            PlannerSettings(
                vcenter=config.vcenter_name or config.vcenter.host,
                fallback=config.match_fallback,
                legacy_host_label=config.shared.legacy_host_label,
                failure_domains=config.failure_domains,
            ),
            ctx.kube,
            store,
            ctx.bus.publish_event,
            EventRecorder(ctx.kube, ctx.program, ctx.identity),
            informer,
            workers=config.patch_concurrency,
            retry=Retry(config.retry_base_seconds, config.retry_max_seconds),
        )
        labeller.load_topology(await store.snapshot())
        self.labeller = labeller
        ctx.start(watcher.run(), name="vcenter-watch")
        ctx.start(_apply_batches(watcher, labeller), name="inventory-batches")
        ctx.start(labeller.run(), name="reconcile-workers")
        if config.failure_domains.enabled:
            ctx.start(
                refresh_tags_forever(config.vcenter, config.failure_domains, labeller),
                name="vcenter-tags",
            )
        ctx.start(
            labeller.resync_forever(config.resync_seconds, watcher.request_full_read),
            name="resync",
        )
        await informer.run()


async def _apply_batches(watcher: InventoryWatcher, labeller: Labeller) -> None:
    while True:
        batch = await watcher.batches.get()
        labeller.on_inventory(batch)
