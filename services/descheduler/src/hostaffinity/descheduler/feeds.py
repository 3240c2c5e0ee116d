"""What keeps the descheduler's state current, so a cycle never lists anything: informers for
Pods, Nodes, Namespaces, PodDisruptionBudgets (and KubeVirt VMIs and migrations), the topology
KV watch, and `vm.moved` on a durable consumer. Each feed pokes the trigger when a change may
have created a violation or a place to go.

A `vm.moved` event starts a cycle; the placement it reports is already in the KV (the
node-labeller writes the KV before it publishes), which the watch applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from hostaffinity.affinity.model import Namespace, decode_namespace
from hostaffinity.descheduler.kubevirt import (
    VirtualMachineInstance,
    VirtualMachineInstanceMigration,
    decode_migration,
    decode_vmi,
)
from hostaffinity.descheduler.model import (
    DeschedulerNode,
    DeschedulerPod,
    PodDisruptionBudget,
    decode_node,
    decode_pdb,
    decode_pod,
)
from hostaffinity.descheduler.state import ClusterState
from hostaffinity.descheduler.triggers import CycleTrigger, node_trigger, pod_trigger
from hostaffinity.runtime.informer import Informer, InformerEvent, InformerSettings
from hostaffinity.runtime.kube import KubeClient, ResourceRef
from hostaffinity.runtime.kv import Bootstrapped, NodeChange, TopologyStore
from hostaffinity.schema import LABEL_ESXI_HOST, TopologyEvent, VmMoved

_log = logging.getLogger(__name__)
T = TypeVar("T")

PODS: Final = ResourceRef("", "v1", "pods")
NODES: Final = ResourceRef("", "v1", "nodes")
NAMESPACES: Final = ResourceRef("", "v1", "namespaces")
PDBS: Final = ResourceRef("policy", "v1", "poddisruptionbudgets")
VMIS: Final = ResourceRef("kubevirt.io", "v1", "virtualmachineinstances")
MIGRATIONS: Final = ResourceRef("kubevirt.io", "v1", "virtualmachineinstancemigrations")
RETRY_SECONDS: Final = 2.0
Handler = Callable[[InformerEvent[T]], Awaitable[None]]


class Feeds:
    """Runs every feed into one state until cancelled; `synced()` once all initial lists are in."""

    def __init__(
        self,
        client: KubeClient,
        topology: TopologyStore,
        state: ClusterState,
        trigger: CycleTrigger,
        *,
        kubevirt: bool,
        on_migration: Callable[[VirtualMachineInstanceMigration], Awaitable[None]],
        settings: InformerSettings | None = None,
    ) -> None:
        self._topology = topology
        self._state = state
        self._trigger = trigger
        self._on_migration = on_migration
        self.placements_synced = False

        def informer(ref: ResourceRef, handler: Handler[Any], decode: Any) -> Informer[Any]:
            return Informer(client, ref, handler, decode, settings=settings)

        self.required: list[Informer[Any]] = [
            informer(PODS, self._pod, decode_pod),
            informer(NODES, self._node, decode_node),
            informer(NAMESPACES, self._namespace, decode_namespace),
            informer(PDBS, self._pdb, decode_pdb),
        ]
        self.optional: list[Informer[Any]] = []
        if kubevirt:
            self.optional = [
                informer(VMIS, self._vmi, decode_vmi),
                informer(MIGRATIONS, self._migration, decode_migration),
            ]

    def synced(self) -> bool:
        """Every required informer has handed over its list, and the KV replay is done.

        KubeVirt's informers are not required: a cluster without KubeVirt has no VMIs, and a
        virt-launcher pod whose VMI is unknown is left in place anyway."""
        informers_done = all(i.synced.is_set() and i.pending() == 0 for i in self.required)
        return informers_done and self.placements_synced

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in (*self.required, *self.optional):
                group.create_task(informer.run())
            group.create_task(self._follow_topology())

    async def on_event(self, event: TopologyEvent) -> None:
        """The durable consumer's handler: a VM moved to another ESXi host, so run a cycle.

        The placement itself comes from the topology KV only: the node-labeller writes it
        before publishing, and a consumer that replays old events (a new durable starts at the
        stream's beginning) must not set a placement back to where a VM used to be."""
        if isinstance(event, VmMoved):
            self._trigger.poke(f"vm.moved {event.node} -> {event.to_host_name}")

    # -- handlers ------------------------------------------------------------------------------

    async def _pod(self, event: InformerEvent[DeschedulerPod]) -> None:
        old = self._state.pods.get(event.key)
        if event.type == "DELETED":
            self._state.remove_pod(event.key)
            return
        self._state.upsert_pod(event.obj)
        reason = pod_trigger(old, event.obj)
        if reason is not None:
            self._trigger.poke(reason)

    async def _node(self, event: InformerEvent[DeschedulerNode]) -> None:
        old = self._state.nodes.get(event.key)
        if event.type == "DELETED":
            self._state.remove_node(event.key)
            return
        self._state.upsert_node(event.obj)
        reason = node_trigger(old, event.obj)
        if reason is not None:
            self._trigger.poke(reason)

    async def _namespace(self, event: InformerEvent[Namespace]) -> None:
        if event.type == "DELETED":
            self._state.remove_namespace(event.key)
        else:
            self._state.upsert_namespace(event.obj)

    async def _pdb(self, event: InformerEvent[PodDisruptionBudget]) -> None:
        if event.type == "DELETED":
            self._state.remove_pdb(event.key)
        else:
            self._state.upsert_pdb(event.obj)

    async def _vmi(self, event: InformerEvent[VirtualMachineInstance]) -> None:
        if event.type == "DELETED":
            self._state.remove_vmi(event.key)
            return
        old = self._state.vmis.get(event.key)
        self._state.upsert_vmi(event.obj)
        if old is not None and (
            old.spec.affinity != event.obj.spec.affinity
            or old.spec.node_selector != event.obj.spec.node_selector
        ):
            self._trigger.poke(f"VMI {event.key} rules changed")

    async def _migration(self, event: InformerEvent[VirtualMachineInstanceMigration]) -> None:
        if event.type == "DELETED":
            self._state.remove_migration(event.key)
            return
        self._state.upsert_migration(event.obj)
        await self._on_migration(event.obj)
        if not event.obj.in_flight:
            self._trigger.poke(f"migration {event.key} {event.obj.status.phase}")

    async def _follow_topology(self) -> None:
        while True:
            try:
                async with self._topology.watch() as changes:
                    async for change in changes:
                        if isinstance(change, NodeChange):
                            placement = change.placement
                            host = placement.host_label if placement else None
                            if host != self._state.index.domain(change.node, LABEL_ESXI_HOST):
                                self._trigger.poke(f"placement of {change.node} changed")
                            self._state.set_placement(change.node, host)
                        elif isinstance(change, Bootstrapped):
                            self.placements_synced = True
            except Exception as error:  # nats-py raises its own types for a lost connection
                self.placements_synced = False
                _log.warning("topology watch failed (%r); reopening in %gs", error, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)
