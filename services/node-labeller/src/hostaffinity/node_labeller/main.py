"""Entry point: `hostaffinity-node-labeller --config shared.yaml --config node-labeller.yaml`.

Start-up order: health server, Kubernetes client, Lease (only the leader goes on), NATS and the
topology KV (read whole, so a restart only publishes what changed), then the vCenter watch and the
Node informer. SIGTERM stops it all and gives the Lease up.
"""

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Coroutine, Sequence
from typing import Any

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.labeller import NODES, Labeller, Retry
from hostaffinity.node_labeller.nodes import Node
from hostaffinity.node_labeller.reconcile import Settings
from hostaffinity.node_labeller.vcenter_watch import InventoryWatcher
from hostaffinity.runtime.bus import Bus
from hostaffinity.runtime.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.config import ConfigError, load_config
from hostaffinity.runtime.health import HealthServer
from hostaffinity.runtime.informer import Informer, InformerEvent, msgspec_decoder
from hostaffinity.runtime.kube import KubeClient, api_client
from hostaffinity.runtime.kube_events import EventRecorder
from hostaffinity.runtime.kv import Bootstrapped, HostChange, NodeChange, TopologyStore
from hostaffinity.runtime.leader import LeaderElector
from hostaffinity.runtime.telemetry import setup_telemetry
from hostaffinity.schema import EsxiHost, NodePlacement

SERVICE = "node-labeller"
log = logging.getLogger(__name__)


class NodeLabellerService:
    """One process: stands by until it holds the Lease, then labels until stopped."""

    def __init__(self, config: NodeLabellerConfig, identity: str | None = None) -> None:
        self.config = config
        # The Lease holder name: the pod name (hostname) is unique per replica.
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.health = HealthServer(config.health.host, config.health.port)
        self.labeller: Labeller | None = None
        self.informer: Informer[Node] | None = None
        self.watcher: InventoryWatcher | None = None
        self.stopping = asyncio.Event()
        self._standby = True

    def ready(self) -> bool:
        """Ready once the first complete labelling is done; a standby replica is ready too."""
        if self._standby:
            return True
        labeller, informer = self.labeller, self.informer
        return (
            labeller is not None
            and informer is not None
            and labeller.inventory_synced.is_set()
            and informer.synced.is_set()
            and labeller.idle()
        )

    async def run(self) -> None:
        setup_telemetry(f"hostaffinity-{SERVICE}")
        self.health.add_readiness_check("labelling done", self.ready)
        await self.health.start()
        api = await api_client(self.config.kubernetes)
        try:
            kube = KubeClient(api)
            elector = LeaderElector(
                kube,
                namespace=self.config.lease.namespace,
                name=self.config.lease.name,
                identity=self.identity,
                lease_duration_s=self.config.lease.duration_seconds,
                renew_deadline_s=self.config.lease.renew_deadline_seconds,
                retry_period_s=self.config.lease.retry_period_seconds,
                on_lost=self.stopping.set,
            )
            async with elector:
                leading = asyncio.create_task(elector.wait_until_leader())
                stopped = asyncio.create_task(self.stopping.wait())
                await asyncio.wait({leading, stopped}, return_when=asyncio.FIRST_COMPLETED)
                leading.cancel()
                stopped.cancel()
                if elector.is_leader and not self.stopping.is_set():
                    await self._lead(kube)
        finally:
            await api.close()
            await self.health.stop()

    async def _lead(self, kube: KubeClient) -> None:
        log.info("%s leads; labelling nodes", self.identity)
        self._standby = False
        config = self.config
        bus = await Bus.connect(config.nats, name=f"hostaffinity-{SERVICE}-{self.identity}")
        watcher = self.watcher = InventoryWatcher(config.vcenter)
        try:
            store = await bus.ensure_layout()

            async def on_node(event: InformerEvent[Node]) -> None:
                labeller.on_node(event.key)

            informer = self.informer = Informer(kube, NODES, on_node, msgspec_decoder(Node))
            labeller = Labeller(
                Settings(
                    vcenter=config.vcenter_name or config.vcenter.host,
                    fallback=config.match_fallback,
                    legacy_host_label=config.shared.legacy_host_label,
                ),
                kube,
                store,
                bus.publish_event,
                EventRecorder(kube, f"hostaffinity-{SERVICE}", self.identity),
                informer,
                workers=config.patch_concurrency,
                retry=Retry(config.retry_base_seconds, config.retry_max_seconds),
            )
            labeller.load_topology(*await read_topology(store))
            self.labeller = labeller
            await _until_stopped(
                self.stopping,
                watcher.run(),
                self._apply_batches(watcher, labeller),
                informer.run(),
                labeller.run(),
                labeller.resync_forever(config.resync_seconds, watcher.request_full_read),
            )
        finally:
            await bus.close()

    async def _apply_batches(self, watcher: InventoryWatcher, labeller: Labeller) -> None:
        while True:
            raise_if_cancel_requested()  # a publish in on_inventory may have swallowed it
            batch = await watcher.batches.get()
            labeller.on_inventory(batch)


async def _until_stopped(stopping: asyncio.Event, *work: Coroutine[Any, Any, None]) -> None:
    """Run `work` until `stopping` is set; a part that fails ends the rest and raises."""
    tasks = [asyncio.create_task(part) for part in work]
    stop = asyncio.create_task(stopping.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stop:
                task.result()  # raises what ended it
    finally:
        for task in [*tasks, stop]:
            task.cancel()
        await asyncio.gather(*tasks, stop, return_exceptions=True)


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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hostaffinity-node-labeller", description=__doc__)
    parser.add_argument(
        "--config", action="append", default=[], help="YAML file; repeat to layer files"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = load_config(NodeLabellerConfig, args.config)
    except ConfigError as error:
        parser.exit(2, f"hostaffinity-node-labeller: {error}\n")
    asyncio.run(_serve(NodeLabellerService(config)))


async def _serve(service: NodeLabellerService) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, service.stopping.set)
    with contextlib.suppress(asyncio.CancelledError):
        await service.run()
