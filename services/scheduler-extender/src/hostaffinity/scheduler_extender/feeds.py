"""What keeps the cache current: informers for Pods, Nodes and Namespaces, and the topology watch.

Each informer reports synced once its first list has been handed to the cache, and stays synced:
a backlog of events afterwards is lag (a metric), not a reason to stop deciding, since
kube-scheduler's own informers lag the same way. The placements are live only while the NATS
connection that feeds them is: a disconnect (seen on the connection, whether or not the watch
noticed) makes them unsynced at once, so the extender answers `Error` and `/readyz` fails rather
than decide from a view that may be stale. After any reconnect the watch is opened again and
replays the whole bucket (nodes whose key went away meanwhile lose their placement); the
placements are live again when the replay ends. How long they were not is `stale()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec

from hostaffinity.affinity.model import Pod, decode_namespace, decode_node, decode_pod
from hostaffinity.runtime.bus.kv import Bootstrapped, NodeChange, TopologyChange, TopologyStore
from hostaffinity.runtime.bus.topology_feed import Link, follow_topology
from hostaffinity.runtime.kube.client import NAMESPACES, NODES, PODS, KubeClient
from hostaffinity.runtime.kube.feeds import Feed, informers
from hostaffinity.runtime.kube.informer import Informer, InformerSettings, upsert_or_remove
from hostaffinity.scheduler_extender.core.cache import ExtenderCache


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""


class _Status(msgspec.Struct):
    conditions: list[_Condition] = msgspec.field(default_factory=list)


class _Scheduling(msgspec.Struct):
    status: _Status = msgspec.field(default_factory=_Status)


_scheduling = msgspec.json.Decoder(_Scheduling)


class ObservedPod(msgspec.Struct, frozen=True):
    """A pod as the informer reports it; `unschedulable` when kube-scheduler gave up on it for
    now (condition PodScheduled=False), which ends its in-flight reservation."""

    pod: Pod
    unschedulable: bool = False


def decode_observed_pod(raw: bytes) -> ObservedPod:
    """The pod, and for an unassigned one its PodScheduled condition."""
    pod = decode_pod(raw)
    if pod.spec.node_name:
        return ObservedPod(pod)
    conditions = _scheduling.decode(raw).status.conditions
    return ObservedPod(
        pod, any(c.type == "PodScheduled" and c.status == "False" for c in conditions)
    )


def _upsert_observed(cache: ExtenderCache) -> Callable[[ObservedPod], None]:
    return lambda seen: cache.upsert_pod(seen.pod, unschedulable=seen.unschedulable)


class CacheFeeds:
    """Runs the three informers and the topology watch into one cache until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        topology: TopologyStore,
        cache: ExtenderCache,
        settings: InformerSettings | None = None,
        *,
        link: Link = lambda: 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topology = topology
        self._cache = cache
        self._link = link
        self._clock = clock
        self._placements_synced = False
        self._stale_since = clock()
        self.informers = informers(
            client,
            [
                Feed(
                    PODS,
                    upsert_or_remove(_upsert_observed(cache), cache.remove_pod),
                    decode_observed_pod,
                ),
                Feed(NODES, upsert_or_remove(cache.upsert_node, cache.remove_node), decode_node),
                Feed(
                    NAMESPACES,
                    upsert_or_remove(cache.upsert_namespace, cache.remove_namespace),
                    decode_namespace,
                ),
            ],
            settings,
        )
        self._sources = dict(zip(("pods", "nodes", "namespaces"), self.informers, strict=True))
        for source, informer in self._sources.items():
            cache.add_sync_check(source, self._informer_synced(informer))
        cache.add_sync_check("placements", lambda: self._placements_synced)

    @staticmethod
    def _informer_synced(informer: Informer[Any]) -> Callable[[], bool]:
        """True from the moment the first list is all in the cache, for good."""
        done = False

        def synced() -> bool:
            nonlocal done
            done = done or informer.caught_up()
            return done

        return synced

    def lag(self) -> dict[str, int]:
        """Informer events received and not yet applied, per source."""
        return {source: informer.pending() for source, informer in self._sources.items()}

    def stale(self) -> dict[str, float]:
        """Seconds the placements have not been live (0 while they are)."""
        if self._placements_synced:
            return {"placements": 0.0}
        return {"placements": self._clock() - self._stale_since}

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run())
            group.create_task(
                follow_topology(
                    self._topology,
                    self._on_topology,
                    link=self._link,
                    on_lost=self._placements_lost,
                )
            )

    def _placements_lost(self) -> None:
        if self._placements_synced:
            self._placements_synced = False
            self._stale_since = self._clock()

    def _on_topology(self, change: TopologyChange) -> None:
        if isinstance(change, NodeChange):
            host = change.placement.host_label if change.placement else None
            self._cache.set_placement(change.node, host)
        elif isinstance(change, Bootstrapped):
            self._placements_synced = True
