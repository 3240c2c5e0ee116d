"""The node-labeller's work while its replica holds the Lease (the runner does the rest).

Start-up order: the topology KV read whole (so a restart only publishes what changed), then the
vCenter watch, the batches it delivers, and the Node informer, side by side until cancelled.
"""

import logging

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.labeller import Labeller
from hostaffinity.node_labeller.nodes import Node
from hostaffinity.node_labeller.reconcile import Settings
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher
from hostaffinity.runtime.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.informer import Informer, InformerEvent, msgspec_decoder
from hostaffinity.runtime.kube import NODES
from hostaffinity.runtime.kube_events import EventRecorder
from hostaffinity.runtime.kv import Bootstrapped, HostChange, NodeChange, TopologyStore
from hostaffinity.runtime.runner import ServiceContext
from hostaffinity.runtime.vcenter import connect
from hostaffinity.schema import EsxiHost, NodePlacement

log = logging.getLogger(__name__)


class NodeLabelling:
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
        watcher = self.watcher = InventoryWatcher(lambda: connect(config.vcenter))
        try:
            store = await ctx.bus.ensure_layout()
            labeller = Labeller(
                Settings(
                    vcenter=config.vcenter_name or config.vcenter.host,
                    fallback=config.match_fallback,
                    legacy_host_label=config.shared.legacy_host_label,
                ),
                ctx.kube,
                store,
                ctx.bus.publish_event,
                EventRecorder(ctx.kube, ctx.program, ctx.identity),
                patch_concurrency=config.patch_concurrency,
            )
            labeller.load_topology(*await read_topology(store))
            self.labeller = labeller

            async def on_node(event: InformerEvent[Node]) -> None:
                deleted = event.type == "DELETED"
                await labeller.on_node(None if deleted else event.obj, event.obj.name)

            self.informer = Informer(ctx.kube, NODES, on_node, msgspec_decoder(Node))
            ctx.start(watcher.run(), name="vcenter-watch")
            ctx.start(_apply_batches(watcher, labeller), name="inventory-batches")
            await self.informer.run()
        finally:
            watcher.stop()


async def _apply_batches(watcher: InventoryWatcher, labeller: Labeller) -> None:
    while True:
        raise_if_cancel_requested()  # a publish in on_inventory may have swallowed it
        batch = await watcher.batches.get()
        await labeller.on_inventory(batch)


async def read_topology(store: TopologyStore) -> tuple[list[NodePlacement], list[EsxiHost]]:
    """Every placement and host the KV holds now (the watch's initial values)."""
    placements: list[NodePlacement] = []
    hosts: list[EsxiHost] = []
    async with store.watch() as changes:
        async for change in changes:
            if isinstance(change, Bootstrapped):
                break
            if isinstance(change, NodeChange) and change.placement is not None:
                placements.append(change.placement)
            elif isinstance(change, HostChange) and change.host is not None:
                hosts.append(change.host)
    return placements, hosts
