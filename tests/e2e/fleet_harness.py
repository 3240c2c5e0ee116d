"""Installs of hostaffinity joined by the fleet hub, as they ship, on loopback and one vcsim.

The hub is tests/platform/fleet_hub.py: three hub servers from k8s/components/fleet-hub, each
install's bus the shipped three-server bus joined as a leaf node with what `hostaffinity fleet
join` wrote, the hub provisioned by `hostaffinity fleet provision` (the view sourcing every
install, the leases bucket), each install's mirror by `hostaffinity bus provision`. Each install
is a Kubernetes cluster of its own (its API double, which calls its admission webhook on pod
creation as kube-apiserver does) running, as main() runs them and under their own bus
identities, a node-labeller, a drs-translator (fleet rule leases on the hub), a descheduler
(placement summary, fleet groups) and the admission webhook. Nothing plays the hub: what an
install knows of another comes through the hub's sourcing and its own mirror.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from hostaffinity.admission_webhook.config import AdmissionWebhookConfig, WebhookSettings
from hostaffinity.admission_webhook.main import service_spec as webhook_spec
from hostaffinity.admission_webhook.service import AdmissionWebhookWork
from hostaffinity.descheduler.config import DeschedulerConfig, DeschedulerSettings, ExecutorSettings
from hostaffinity.descheduler.service import DeschedulerWork
from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.process.config import (
    ClusterSettings,
    HealthSettings,
    KubernetesSettings,
    SharedSettings,
)
from hostaffinity.runtime.runner import running_service
from hostaffinity.schema import LABEL_FLEET_GROUP, DrsOwnership, Event, WorkloadPlacement
from tests.e2e.descheduler_harness import node_object, pod_object, running_descheduler
from tests.e2e.drs_harness import RunningTranslator, drs_config, records, running_translator
from tests.e2e.installs_harness import PATIENT_LEASE
from tests.e2e.labeller_harness import Replica, labeller_config, running, stream_events, wait_ready
from tests.integration.webhook_harness import (
    created_pod,
    eventually_true,
    ready,
    seed_configuration,
    seed_namespace,
    written_ca,
)
from tests.platform.fleet_hub import FleetHub, view
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import NatsCluster
from tests.platform.vcsim import Vcsim

# The hub's lease bucket keeps a key this long without a renewal (`fleet provision
# --lease-max-age`): renewals every second, a lost holder replaced within seconds.
LEASE_MAX_AGE = 3.0
WEBHOOK_SERVICE = ("hostaffinity", "admission-webhook")


def member(name: str, node: str, group: str) -> dict[str, Any]:
    """A running pod of a ReplicaSet of its own, in the fleet group `group`."""
    pod = pod_object(name, name, node, owner=f"{name}-rs", affinity=None)
    pod["metadata"]["labels"][LABEL_FLEET_GROUP] = group
    return pod


@dataclass
class FleetInstall:
    """One cluster's hostaffinity in the fleet: its name is also its cluster identity
    (`shared.cluster.name`) and its name on the hub."""

    name: str
    nodes: Sequence[str]
    kube: KubeDouble
    bus: NatsCluster
    kubeconfig: Path
    labeller: Replica | None = None
    translator: RunningTranslator | None = None
    descheduler: DeschedulerWork | None = None
    webhook: AdmissionWebhookWork | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    def _sections(self, identity: str) -> dict[str, Any]:
        """Its bus as `identity`, its double, a free health port, its cluster name."""
        return {
            "nats": self.bus.settings(identity),
            "health": HealthSettings(host="127.0.0.1", port=0),
            "kubernetes": KubernetesSettings(kubeconfig=str(self.kubeconfig)),
            "shared": SharedSettings(cluster=ClusterSettings(name=self.name)),
        }

    def _leased(self, identity: str) -> dict[str, Any]:
        """The sections of a Lease-gated service: a patient Lease, as every install's services
        share this test's one event loop."""
        return self._sections(identity) | {"lease": PATIENT_LEASE}

    async def start(self, vc: Vcsim) -> None:
        """Its Nodes, the webhook configuration as k8s/base ships it, then each service until it
        works: the labeller has labelled, the translator made its first cycle, the descheduler
        synced, the webhook serves with its caBundle written."""
        for node in self.nodes:
            self.kube.seed(node_object(node))
        seed_namespace(self.kube)
        seed_configuration(self.kube)
        self.kube.call_webhooks(self._webhook_endpoints)
        stack = self._stack
        labeller = labeller_config(vc, self.bus, self.kubeconfig, **self._leased("node-labeller"))
        self.labeller = await stack.enter_async_context(running(labeller, self.name))
        await wait_ready(self.labeller, within=60)
        fast = DrsSettings(shared_rules_refresh_seconds=0.5)
        drs = drs_config(vc, self.bus, self.kubeconfig, drs=fast, **self._leased("drs-translator"))
        self.translator = await stack.enter_async_context(running_translator(drs))
        descheduler = DeschedulerConfig(
            **self._leased("descheduler"),
            descheduler=DeschedulerSettings(
                kubevirt=False,
                debounce_seconds=0.2,
                eviction=ExecutorSettings(retry_initial_seconds=0.2, retry_max_seconds=1.0),
            ),
        )
        self.descheduler = await stack.enter_async_context(
            running_descheduler(descheduler, identity=f"descheduler-{self.name}")
        )
        await self._start_webhook()

    async def _start_webhook(self) -> None:
        work = AdmissionWebhookWork()
        config = AdmissionWebhookConfig(
            **self._sections("admission-webhook"),
            webhook=WebhookSettings(host="127.0.0.1", port=0, extra_hostnames=["127.0.0.1"]),
        )
        runner = await self._stack.enter_async_context(
            running_service(webhook_spec(work), config, identity=f"webhook-{self.name}")
        )
        await eventually_true(lambda: ready(runner.health.port), f"{self.name}'s webhook ready")
        assert written_ca(self.kube) is not None
        self.webhook = work
        self._stack.callback(setattr, self, "webhook", None)

    def _webhook_endpoints(self, namespace: str, name: str) -> list[str]:
        """The webhook Service's ready endpoints: this install's webhook while it serves."""
        server = None if self.webhook is None else self.webhook.server
        if (namespace, name) != WEBHOOK_SERVICE or server is None or not server.serving:
            return []
        return [f"https://127.0.0.1:{server.port}"]

    async def remove(self) -> None:
        """Its services stopped, as SIGTERM stops them (the drs-translator lets its leases go)."""
        await self._stack.aclose()
        self.labeller = self.translator = self.descheduler = None

    async def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        """`pod` created through the API, its admission path (the webhook) included: as
        stored."""
        return await created_pod(self.kube, pod["metadata"]["namespace"], pod)

    def terminating(self) -> list[str]:
        """Its pods being evicted (a deletionTimestamp), by name."""
        return sorted(
            p["metadata"]["name"]
            for p in self.kube.store.objects("pods", None)
            if p["metadata"].get("deletionTimestamp")
        )

    async def fleet_records(self) -> dict[str, DrsOwnership]:
        """Its ownership records of fleet rules, by name."""
        async with self.bus.connection("cli") as bus:
            found = await records(bus)
        return {r.name: r for r in found.values() if r.name.startswith("hostaffinity-fleet-")}

    async def events(self) -> list[Event]:
        """Every event its own events stream holds, oldest first."""
        async with self.bus.connection("cli") as bus:
            return list(await stream_events(bus))

    async def members(self, group: str) -> dict[str, str]:
        """The fleet group's members as this install's mirror of the view places them:
        cluster -> the host name under its member ("" while not placed)."""
        async with self.bus.connection("cli") as bus:
            seen = await view(bus)
        found = {}
        for key, value in seen.items():
            if ".workload." not in key:
                continue
            summary = msgspec.json.decode(value, type=WorkloadPlacement)
            if summary.fleet_group == group:
                for replica in summary.replicas:
                    found[summary.cluster] = replica.host_name
        return found


@contextlib.asynccontextmanager
async def fleet_on(
    vc: Vcsim,
    workdir: Path,
    plans: Sequence[tuple[str, Sequence[str]]],
    *,
    cuttable: str = "",
    pods: dict[str, list[dict[str, Any]]] | None = None,
) -> AsyncIterator[tuple[FleetHub, list[FleetInstall]]]:
    """The hub and one install per (name, its nodes), joined, provisioned and started, with
    `pods` seeded in each named install first; the install `cuttable` dials the hub through
    `hub.links[cuttable]`. Everything stopped after the block."""
    async with contextlib.AsyncExitStack() as stack:
        hub = FleetHub(workdir / "hub")
        fleet = []
        for name, nodes in plans:
            bus = hub.join(name, name, workdir / name, cuttable=name == cuttable)
            kube = KubeDouble()
            await kube.start()  # the kubeconfig names the port it listens on
            stack.push_async_callback(kube.stop)
            kubeconfig = kube.write_kubeconfig(workdir / name / "kubeconfig")
            fleet.append(FleetInstall(name, nodes, kube, bus, kubeconfig))
        await hub.start()
        stack.push_async_callback(hub.close)
        for install in fleet:
            await install.bus.start()
            stack.push_async_callback(install.bus.stop)
            await install.bus.provision()  # its mirror of the view, as the provision Job makes it
            for pod in (pods or {}).get(install.name, []):
                install.kube.seed(pod)
        await hub.provision(lease_max_age_seconds=LEASE_MAX_AGE)
        for install in fleet:
            stack.push_async_callback(install.remove)
            await install.start(vc)
        yield hub, fleet


async def events_of_others(fleet: Sequence[FleetInstall]) -> dict[str, list[str]]:
    """Per install, the events its stream holds that another install published (none, when the
    leaf links keep every install's events its own)."""
    found = {}
    for install in fleet:
        found[install.name] = [
            f"{event.cluster}: {type(event).__name__}"
            for event in await install.events()
            if event.cluster != install.name
        ]
    return found
