"""Several installs of hostaffinity on one vCenter, as an estate runs them: each Kubernetes
cluster (its own API double) with its own bus (its own nats-server), node-labeller and
drs-translator, all pointed at the same vcsim."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from nats.js.errors import KeyNotFoundError

from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import ClusterSettings, LeaseSettings, SharedSettings
from hostaffinity.schema import (
    DRS_BUCKET,
    LABEL_ESXI_HOST,
    DrsClusterReport,
    drs_report_key,
    install_token,
)
from tests.e2e.drs_harness import RunningTranslator, drs_config, running_translator
from tests.e2e.labeller_harness import Replica, labeller_config, node_object, running, wait_ready
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import Vcsim

PATIENT_LEASE = LeaseSettings(
    namespace="kube-system", duration_seconds=15.0, renew_deadline_seconds=10.0,
    retry_period_seconds=0.5,
)  # fmt: skip


@dataclass
class Install:
    """One cluster's hostaffinity: its API double, bus and services (once `started`)."""

    name: str
    kube: KubeDouble
    nats: NatsServer
    kubeconfig: Path
    nodes: Sequence[str]
    cluster_name: str = ""  # shared.cluster.name; empty: the kube-system UID
    # More of the drs-translator's config sections (its `fleet`), and the Nodes' status (Ready
    # and allocatable, for a descheduler's node fit).
    drs_sections: dict[str, Any] = field(default_factory=dict)
    node_status: dict[str, Any] | None = None
    labeller: Replica | None = None
    translator: RunningTranslator | None = None
    bus: Bus | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _translating: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def cluster_identity(self) -> str:
        """The identity the services derive: the configured name, else kube-system's UID."""
        if self.cluster_name:
            return self.cluster_name
        namespace = self.kube.read("v1", "namespaces", "kube-system")
        assert namespace is not None
        return str(namespace["metadata"]["uid"])

    @property
    def token(self) -> str:
        """The install's part of every DRS name."""
        return install_token(self.cluster_identity)

    def idle(self) -> bool:
        return self.translator is not None and self.translator.translator.idle()

    def sections(self) -> dict[str, Any]:
        """Its cluster name, and a patient Lease: every install's services share this test's one
        event loop, which a loaded machine can hold up for longer than the fast Lease allows."""
        return {
            "shared": SharedSettings(cluster=ClusterSettings(name=self.cluster_name)),
            "lease": PATIENT_LEASE,
        }

    async def start(self, vc: Vcsim) -> None:
        """The Nodes, then the labeller (until it has labelled) and the drs-translator (until
        its first cycle), both as `main()` runs them."""
        for node in self.nodes:
            status = {} if self.node_status is None else {"status": self.node_status}
            self.kube.seed(node_object(node, **status))
        config = labeller_config(vc, self.nats, self.kubeconfig, **self.sections())
        self.labeller = await self._stack.enter_async_context(running(config, self.name))
        await wait_ready(self.labeller)
        # Other installs' rules read every half second (30 s by default), so that what each
        # install reports of the other's follows within a test's patience.
        fast = DrsSettings(shared_rules_refresh_seconds=0.5)
        sections = self.sections() | self.drs_sections
        drs = drs_config(vc, self.nats, self.kubeconfig, drs=fast, **sections)
        self._stack.push_async_callback(self._translating.aclose)
        self.translator = await self._translating.enter_async_context(running_translator(drs))
        self.bus = await self._stack.enter_async_context(self.nats.connection(f"{self.name}-test"))

    async def stop_translator(self) -> None:
        """The drs-translator stopped (as SIGTERM would), the rest left running."""
        await self._translating.aclose()
        self.translator = None

    async def stop(self) -> None:
        await self._stack.aclose()

    async def report(self, vcenter: str, cluster_moid: str) -> DrsClusterReport | None:
        """The cluster's report on this install's bus, as `hostaffinity status` reads it."""
        assert self.bus is not None
        kv = await self.bus.js.key_value(DRS_BUCKET)
        try:
            entry = await kv.get(drs_report_key(vcenter, cluster_moid))
        except KeyNotFoundError:
            return None
        return msgspec.json.decode(entry.value or b"", type=DrsClusterReport)

    def seed_apart(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        """One replica per node of this cluster, each with required anti-affinity on the
        ESXi-host key to the others (`kube-system/coredns` as many clusters run it)."""
        for i, node in enumerate(self.nodes):
            self.kube.seed(replica(namespace, f"{name}-{i}", node, labels))

    def delete_apart(self, namespace: str, name: str) -> None:
        for i in range(len(self.nodes)):
            self.kube.delete("v1", "pods", f"{name}-{i}", namespace)


def replica(namespace: str, name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": LABEL_ESXI_HOST}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.invalid/pause:3"}],
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            },
        },
    }


@contextlib.asynccontextmanager
async def installs_on(
    vc: Vcsim, workdir: Path, plans: Sequence[tuple[str, Sequence[str], str]]
) -> AsyncIterator[list[Install]]:
    """One install per (name, its nodes, its configured cluster name), each on its own double
    and nats-server, all started against `vc`; stopped (as SIGTERM would) after the block."""
    async with contextlib.AsyncExitStack() as stack:
        installs = []
        for name, nodes, cluster_name in plans:
            kube = KubeDouble()
            await kube.start()
            stack.push_async_callback(kube.stop)
            nats = NatsServer(workdir / name)
            (workdir / name).mkdir(parents=True, exist_ok=True)
            await nats.start()
            stack.push_async_callback(nats.stop)
            await nats.provision()
            kubeconfig = kube.write_kubeconfig(workdir / name / "kubeconfig")
            installs.append(Install(name, kube, nats, kubeconfig, nodes, cluster_name))
        for install in installs:
            stack.push_async_callback(install.stop)
            await install.start(vc)
        yield installs
