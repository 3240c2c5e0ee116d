"""What keeps the cache current: informers for Pods, Nodes and Namespaces, and the topology watch.

Each source reports synced to the cache: an informer once its first list has been handed to the
cache (nothing left queued), the topology once the KV watch has replayed every current value. A
topology watch that fails (NATS away) is opened again; it replays everything, so no change is
lost, and the placements count as unsynced until that replay ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from hostaffinity.affinity.model import decode_namespace, decode_node, decode_pod
from hostaffinity.runtime.informer import Informer, InformerEvent, InformerSettings
from hostaffinity.runtime.kube import NAMESPACES, NODES, PODS, KubeClient
from hostaffinity.runtime.kv import Bootstrapped, NodeChange, TopologyStore
from hostaffinity.scheduler_extender.cache import ExtenderCache

_log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_SECONDS: Final = 2.0


def _handler(
    upsert: Callable[[T], None], remove: Callable[[str], None]
) -> Callable[[InformerEvent[T]], Awaitable[None]]:
    async def handle(event: InformerEvent[T]) -> None:
        if event.type == "DELETED":
            remove(event.key)
        else:
            upsert(event.obj)

    return handle


class CacheFeeds:
    """Runs the three informers and the topology watch into one cache until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        topology: TopologyStore,
        cache: ExtenderCache,
        settings: InformerSettings | None = None,
    ) -> None:
        self._topology = topology
        self._cache = cache
        self._placements_synced = False
        self.informers: list[Informer[Any]] = [
            Informer(
                client,
                PODS,
                _handler(cache.upsert_pod, cache.remove_pod),
                decode_pod,
                settings=settings,
            ),
            Informer(
                client,
                NODES,
                _handler(cache.upsert_node, cache.remove_node),
                decode_node,
                settings=settings,
            ),
            Informer(
                client,
                NAMESPACES,
                _handler(cache.upsert_namespace, cache.remove_namespace),
                decode_namespace,
                settings=settings,
            ),
        ]
        for source, informer in zip(("pods", "nodes", "namespaces"), self.informers, strict=True):
            cache.add_sync_check(source, self._informer_synced(informer))
        cache.add_sync_check("placements", lambda: self._placements_synced)

    @staticmethod
    def _informer_synced(informer: Informer[Any]) -> Callable[[], bool]:
        return lambda: informer.synced.is_set() and informer.pending() == 0

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run())
            group.create_task(self._follow_topology())

    async def _follow_topology(self) -> None:
        while True:
            try:
                await self._watch_topology()
            except Exception as error:
                # nats-py raises its own types for a lost connection or a missing bucket.
                self._placements_synced = False
                _log.warning("topology watch failed (%r); reopening in %gs", error, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    async def _watch_topology(self) -> None:
        async with self._topology.watch() as changes:
            async for change in changes:
                if isinstance(change, NodeChange):
                    host = change.placement.host_label if change.placement else None
                    self._cache.set_placement(change.node, host)
                elif isinstance(change, Bootstrapped):
                    self._placements_synced = True
