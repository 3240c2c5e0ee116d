"""Installs of hostaffinity joined by a fleet hub, on loopback and one vcsim: each install's bus is
a leaf node of the hub's, each in its own JetStream domain (tests/platform/nats_leaf.py), and runs
a node-labeller, a drs-translator taking fleet rule leases through the hub's domain and a
descheduler, against its own Kubernetes double.

The hub's sourcing is played by `FleetViewFiller`: every install's fleet group members, as its
pods and its topology bucket place them, put as `WorkloadPlacement`s in every install's
`hostaffinity-fleet` bucket, every `period` seconds, as the hub would mirror them (the fleet hub's
own machinery is built elsewhere; this is what the services read of it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.js.kv import KeyValue

from hostaffinity.descheduler.config import DeschedulerConfig, DeschedulerSettings
from hostaffinity.descheduler.executor import ExecutorSettings
from hostaffinity.descheduler.service import DeschedulerWork
from hostaffinity.drs_translator.config import FleetRuleSettings
from hostaffinity.schema import (
    FLEET_BUCKET,
    FLEET_LEASES_BUCKET,
    LABEL_FLEET_GROUP,
    DrsOwnership,
    FleetRuleLease,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_host_id,
    fleet_key,
    workload_key,
)
from tests.e2e.descheduler_harness import pod_object, running_descheduler
from tests.e2e.drs_harness import records
from tests.e2e.harness import runner_sections
from tests.e2e.installs_harness import Install
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_leaf import HUB_DOMAIN, DomainNatsServer, hub_server, install_server
from tests.platform.vcsim import Vcsim

# The hub's lease bucket keeps a key this long without a renewal: renewals every second.
LEASE_MAX_AGE = 3.0
NODE_STATUS = {
    "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
    "conditions": [{"type": "Ready", "status": "True"}],
}


def member(name: str, node: str, group: str) -> dict[str, Any]:
    """A running pod of a ReplicaSet of its own, in the fleet group `group`."""
    pod = pod_object(name, name, node, owner=f"{name}-rs", affinity=None)
    pod["metadata"]["labels"][LABEL_FLEET_GROUP] = group
    return pod


@dataclass
class FleetInstall:
    """One install of the fleet: the install and its descheduler."""

    install: Install
    descheduler: DeschedulerWork | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def name(self) -> str:
        return self.install.name

    async def start_descheduler(self) -> None:
        install = self.install
        config = DeschedulerConfig(
            **(
                runner_sections(install.nats, install.kubeconfig, "descheduler")
                | install.sections()
            ),
            descheduler=DeschedulerSettings(
                kubevirt=False,
                eviction=ExecutorSettings(retry_initial_seconds=0.2, retry_max_seconds=1.0),
            ),
        )
        self.descheduler = await self._stack.enter_async_context(
            running_descheduler(config, identity=f"descheduler-{self.name}")
        )

    async def remove(self) -> None:
        """This install's hostaffinity stopped (SIGTERM): descheduler, drs-translator, labeller."""
        await self._stack.aclose()
        self.descheduler = None
        await self.install.stop()

    async def fleet_records(self) -> dict[str, DrsOwnership]:
        """Its ownership records of fleet rules, by name."""
        assert self.install.bus is not None
        return {
            r.name: r
            for r in (await records(self.install.bus)).values()
            if r.name.startswith("hostaffinity-fleet-")
        }

    def terminating(self) -> list[str]:
        """Its pods being evicted (a deletionTimestamp), by name."""
        return sorted(
            p["metadata"]["name"]
            for p in self.install.kube.store.objects("pods", None)
            if p["metadata"].get("deletionTimestamp")
        )


class FleetViewFiller:
    """Plays the hub: each install's members, as its pods and topology place them, in every
    install's fleet view, until cancelled. `removed` installs are dropped from every view."""

    def __init__(self, installs: Sequence[FleetInstall], vcenter_uuid: str, period: float = 0.2):
        self._installs = list(installs)
        self._uuid = vcenter_uuid
        self._period = period
        self.removed: set[str] = set()
        self._written: dict[str, dict[str, WorkloadPlacement]] = {}

    async def run(self) -> None:
        while True:
            await self.fill()
            await asyncio.sleep(self._period)

    async def fill(self) -> None:
        view: dict[str, WorkloadPlacement] = {}
        for fleet in self._installs:
            if fleet.name not in self.removed:
                view.update(await self._summaries(fleet.install))
        for fleet in self._installs:
            if fleet.name in self.removed or fleet.install.bus is None:
                continue
            kv = await fleet.install.bus.js.key_value(FLEET_BUCKET)
            await self._mirror(kv, fleet.name, view)

    async def _mirror(self, kv: KeyValue, name: str, view: dict[str, WorkloadPlacement]) -> None:
        written = self._written.setdefault(name, {})
        for key in set(written) - set(view):
            await kv.delete(key)
            del written[key]
        for key, summary in view.items():
            if written.get(key) != summary:
                await kv.put(key, msgspec.json.encode(summary))
                written[key] = summary

    async def _summaries(self, install: Install) -> dict[str, WorkloadPlacement]:
        assert install.bus is not None
        topology = await install.bus.topology()
        found: dict[str, WorkloadPlacement] = {}
        for pod in install.kube.store.objects("pods", None):
            meta = pod["metadata"]
            group = (meta.get("labels") or {}).get(LABEL_FLEET_GROUP)
            node = pod["spec"].get("nodeName")
            if not group or not node or meta.get("deletionTimestamp"):
                continue
            placed = await topology.get_node(node)
            if placed is None:
                continue
            owner = meta["ownerReferences"][0]["name"]
            replica = ReplicaPlacement(
                pod=meta["name"],
                node=node,
                host_id=fleet_host_id(self._uuid, placed.host_moid, placed.host_name),
                host_name=placed.host_name,
                vcenter=placed.vcenter,
                vsphere_cluster_moid=placed.cluster_moid,
                vm_moid=placed.vm_moid,
            )
            key = fleet_key(install.token, workload_key(meta["namespace"], "ReplicaSet", owner))
            found[key] = WorkloadPlacement(
                cluster=install.cluster_identity,
                namespace=meta["namespace"],
                kind="ReplicaSet",
                name=owner,
                fleet_group=group,
                replicas=[replica],
            )
        return found


@dataclass
class Hub:
    server: DomainNatsServer

    async def lease_holders(self) -> dict[str, str]:
        """Lease key -> the cluster identity holding it, as the hub's bucket has them."""
        nc = Client()
        await nc.connect(self.server.url)
        try:
            kv = await nc.jetstream().key_value(FLEET_LEASES_BUCKET)
            try:
                keys = await kv.keys()
            except Exception:  # nats-py's NoKeysError: an empty bucket
                return {}
            holders = {}
            for key in keys:
                entry = await kv.get(key)
                lease = msgspec.json.decode(entry.value or b"", type=FleetRuleLease)
                holders[key] = lease.holder
            return holders
        finally:
            await nc.close()


@contextlib.asynccontextmanager
async def fleet_on(
    vc: Vcsim, workdir: Path, plans: Sequence[tuple[str, Sequence[str], str]]
) -> AsyncIterator[tuple[Hub, list[FleetInstall]]]:
    """A hub and one install per (name, its nodes, its cluster name), each with its descheduler,
    every install's fleet view mirrored from the others'; stopped (as SIGTERM would) after."""
    async with contextlib.AsyncExitStack() as stack:
        hub = hub_server(workdir)
        await hub.start()
        stack.push_async_callback(hub.stop)
        admin = Client()
        await admin.connect(hub.url)
        stack.push_async_callback(admin.close)
        await admin.jetstream().create_key_value(
            bucket=FLEET_LEASES_BUCKET, history=1, ttl=LEASE_MAX_AGE
        )
        fleet: list[FleetInstall] = []
        for name, nodes, cluster_name in plans:
            kube = KubeDouble()
            await kube.start()
            stack.push_async_callback(kube.stop)
            nats = install_server(workdir, name, hub)
            await nats.start()
            stack.push_async_callback(nats.stop)
            await nats.provision()
            async with nats.connection("fleet-bucket") as setup:
                await setup.js.create_key_value(bucket=FLEET_BUCKET, history=1)
            install = Install(
                name,
                kube,
                nats,
                kube.write_kubeconfig(workdir / name / "kubeconfig"),
                nodes,
                cluster_name,
                drs_sections={
                    "fleet": FleetRuleSettings(hub_domain=HUB_DOMAIN, request_timeout_seconds=0.5)
                },
                node_status=NODE_STATUS,
            )
            fleet.append(FleetInstall(install))
        for member_install in fleet:
            stack.push_async_callback(member_install.remove)
            await member_install.install.start(vc)
            await member_install.start_descheduler()
        yield Hub(hub), fleet
