"""One Kubernetes cluster's hostaffinity in a campaign: its recording API double, its bus and its
service replicas, each replica its own process behind its own proxies to the API, NATS and (for
the drs-translator) vCenter.

The first install runs as the campaign always has: the shipped 3-server NATS cluster (R3, TLS,
one nkey identity per service), two replicas of each leader-elected service, two
admission-webhook replicas that the double calls for every pod created through it (the shipped
MutatingWebhookConfiguration, its caBundle written by the replicas) and one scheduler-extender
that the workload's scheduler calls. A lean one beside it (the machine has two cores) runs one
nats-server from the shipped local.conf, provisioned as `hostaffinity bus provision` does (R1),
and one replica of each leader-elected service, no webhook and no extender.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import yaml

from hostaffinity.admission_webhook.config import WebhookSettings
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import (
    HealthSettings,
    KubernetesSettings,
    LeaseSettings,
    NatsSettings,
)
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.schema import install_token
from tests.campaign.history import AdmissionCall, Clock, History
from tests.campaign.processes import THIS_RELEASE, Release, Replica, settings_env
from tests.campaign.recording import AttributedProxy, Connections, RecordingDouble, VcenterProxy
from tests.e2e.harness import FAST_LEASE
from tests.platform.kube_double.webhooks import WebhookCall
from tests.platform.nats import free_listen_port
from tests.platform.nats_cluster import LocalBus, NatsCluster, ServerProcess
from tests.platform.vcsim import PASSWORD, USERNAME

LEADER_ELECTED: Final = ("node-labeller", "drs-translator", "descheduler")
WEBHOOK: Final = "admission-webhook"
EXTENDER: Final = "scheduler-extender"
# The webhook configuration and the namespace of our services, as k8s/base ships them.
WEBHOOK_CONFIGURATION: Final = (
    Path(__file__).resolve().parents[2]
    / "k8s/base/admission-webhook/mutatingwebhookconfiguration.yaml"
)
SERVICES_NAMESPACE: Final = "hostaffinity"
VCENTER_NAME: Final = "vcsim"
COOLDOWN_S: Final = 10.0
# Faster loops than production, so a minute of campaign sees several of each.
SERVICE_SETTINGS: Final = {
    "node-labeller": {
        "HOSTAFFINITY_LABELLER__RESYNC_SECONDS": "15",
        "HOSTAFFINITY_LABELLER__RETRY_MAX_SECONDS": "2",
    },
    "drs-translator": {
        "HOSTAFFINITY_DRS__RESYNC_SECONDS": "15",
        "HOSTAFFINITY_DRS__RETRY_BASE_SECONDS": "0.5",
        "HOSTAFFINITY_DRS__RETRY_MAX_SECONDS": "5",
        "HOSTAFFINITY_DRS__ERROR_RETRY_SECONDS": "1",
    },
    "descheduler": {
        "HOSTAFFINITY_DESCHEDULER__INTERVAL_SECONDS": "10",
        "HOSTAFFINITY_DESCHEDULER__COOLDOWN_SECONDS": str(COOLDOWN_S),
        "HOSTAFFINITY_DESCHEDULER__KUBEVIRT": "false",
        "HOSTAFFINITY_DESCHEDULER__EVICTION__RETRY_MAX_SECONDS": "2",
    },
    "scheduler-extender": {},
    "admission-webhook": {},
}


@dataclass(frozen=True)
class Shape:
    """What an install runs, and the names that tell its parts from the other install's."""

    name: str  # "a", "b": its History's name
    prefix: str  # of its replicas, NATS servers and fault targets ("" for the first)
    vm_prefix: str  # its node VMs (and Nodes) are named <vm_prefix>1 .. <vm_prefix>N
    node_vms: int
    full: bool  # the first install's shape (module docstring); else the lean one
    lease: LeaseSettings

    @property
    def vm_names(self) -> list[str]:
        return [f"{self.vm_prefix}{i}" for i in range(1, self.node_vms + 1)]


# The lean install's one replica of each service has no rival to hand over to: it runs the
# shipped Lease (client-go's timings), renewed a tenth as often as FAST_LEASE is.
SHIPPED_LEASE: Final = LeaseSettings(namespace="kube-system")
FIRST: Final = Shape("a", "", "node-", 8, full=True, lease=FAST_LEASE)
SECOND: Final = Shape("b", "b-", "b-node-", 6, full=False, lease=SHIPPED_LEASE)
SHAPES: Final = (FIRST, SECOND)


class Install:
    """One cluster's hostaffinity; `replicas` by name (`descheduler-a`, `b-descheduler-a`)."""

    def __init__(
        self,
        shape: Shape,
        workdir: Path,
        history: History,
        clock: Clock,
        vcsim_port: int,
        rule_names: Callable[[str], Awaitable[dict[int, str] | None]],
        release: Release = THIS_RELEASE,
    ) -> None:
        self.shape = shape
        self.release = release  # what its replicas start on (the upgrade fault moves them)
        self.workdir = workdir
        self.history = history
        self.clock = clock
        self.vcsim_port = vcsim_port
        self._rule_names = rule_names
        self.connections = Connections()
        self.bus: NatsCluster | LocalBus = (
            NatsCluster(workdir / "bus")
            if shape.full
            else LocalBus(workdir / "bus", workdir / "bus" / "credentials")
        )
        self.double = RecordingDouble(history, clock, self.connections)
        self.replicas: dict[str, Replica] = {}
        self.listen_ports: dict[str, int] = {}  # replica -> its webhook or extender port
        self._webhooks_ready: set[str] = set()
        self._readiness: asyncio.Task[None] | None = None
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def token(self) -> str:
        """The install token the services derive for this cluster (its kube-system UID)."""
        namespace = self.double.read("v1", "namespaces", "kube-system")
        assert namespace is not None
        return install_token(namespace["metadata"]["uid"])

    @property
    def nats_servers(self) -> dict[str, ServerProcess]:
        """Its nats-servers by fault target (`nats-0` ..., `b-nats`)."""
        servers = self.bus.servers if isinstance(self.bus, NatsCluster) else [self.bus.server]
        return {f"{self.shape.prefix}{server.name}": server for server in servers}

    def connection(self, identity: str) -> contextlib.AbstractAsyncContextManager[Bus]:
        """A client of its bus as `identity` (the runner reads as `cli`)."""
        return self.bus.connection(identity)

    def extender_url(self) -> str | None:
        """The scheduler-extender kube-scheduler calls, or None: the lean install has none."""
        port = self.listen_ports.get(f"{EXTENDER}-a")
        return None if port is None else f"http://127.0.0.1:{port}"

    async def start(self) -> None:
        await self.bus.start()
        if isinstance(self.bus, NatsCluster):
            await self.bus.provision()
        await self.double.start()
        # The services' own namespace (the admission webhook keeps its certificate there), and
        # the webhook configuration the replicas write their CA into.
        self.double.seed(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVICES_NAMESPACE}}
        )
        replicas = ("a", "b") if self.shape.full else ("a",)
        services = (*LEADER_ELECTED, WEBHOOK) if self.shape.full else LEADER_ELECTED
        if self.shape.full:
            self.double.seed(yaml.safe_load(WEBHOOK_CONFIGURATION.read_text(encoding="utf-8")))
            self.double.call_webhooks(self.webhook_endpoints, self._admitted)
        for service in services:
            for suffix in replicas:
                await self._add(service, suffix)
        if self.shape.full:
            await self._add(EXTENDER, "a")
        for replica in self.replicas.values():
            await replica.start()
        if self.shape.full:
            self._readiness = asyncio.create_task(self._follow_webhook_readiness())

    def webhook_endpoints(self, namespace: str, name: str) -> list[str]:
        """The Service's ready endpoints: the webhook replicas running now (a killed or paused
        one leaves them at once here; the real endpoints controller takes a moment more)."""
        if (namespace, name) != (SERVICES_NAMESPACE, WEBHOOK):
            return []
        return [
            f"https://127.0.0.1:{self.listen_ports[replica.name]}"
            for replica in self.replicas.values()
            if replica.name in self._webhooks_ready and replica.running and not replica.paused
        ]

    async def _follow_webhook_readiness(self) -> None:
        """The endpoints controller's part: a webhook replica is an endpoint while /readyz
        answers 200 (polled as often as a readiness probe with periodSeconds 0.25 would)."""
        webhooks = [r for r in self.replicas.values() if r.service == WEBHOOK]
        while True:
            ready = await asyncio.gather(*(r.ready() for r in webhooks))
            self._webhooks_ready = {r.name for r, ok in zip(webhooks, ready, strict=True) if ok}
            await asyncio.sleep(0.25)

    def _admitted(self, call: WebhookCall) -> None:
        self.history.admissions.append(
            AdmissionCall(
                self.clock.now(),
                f"{call.namespace}/{call.name}",
                call.outcome,
                call.sent,
                call.admitted,
            )
        )

    async def _add(self, service: str, suffix: str) -> None:
        name = f"{self.shape.prefix}{service}-{suffix}"
        replica: Replica | None = None

        def identity() -> str:
            return replica.identity if replica is not None else ""

        def proxy(port: int) -> AttributedProxy:
            return AttributedProxy(("127.0.0.1", port), self.connections, identity)

        api = proxy(int(self.double.url.rsplit(":", 1)[1]))
        nats = [proxy(port) for port in self._client_ports()]
        others: list[AttributedProxy] = []
        for each in (api, *nats):
            await each.start()
        health = free_listen_port()
        env = {
            **settings_env("nats", self._nats_settings(service, [p.port for p in nats])),
            **settings_env("health", HealthSettings(host="127.0.0.1", port=health)),
            **settings_env(
                "kubernetes", KubernetesSettings(kubeconfig=str(self._kubeconfig(name, api.port)))
            ),
            "HOSTAFFINITY_DRAIN_SECONDS": "2",
            **SERVICE_SETTINGS[service],
        }
        if service in LEADER_ELECTED:
            env |= settings_env("lease", self.shape.lease)
        if service in ("node-labeller", "drs-translator"):
            vcenter_port = self.vcsim_port
            if service == "drs-translator":
                watched = VcenterProxy(
                    ("127.0.0.1", self.vcsim_port),
                    self.connections,
                    identity,
                    self.history,
                    self.clock,
                    self._rule_names,
                )
                await watched.start()
                others.append(watched)
                vcenter_port = watched.port
            env |= settings_env("vcenters__0", self._vcenter(vcenter_port))
        if service == EXTENDER:
            self.listen_ports[name] = free_listen_port()
            env |= {
                "HOSTAFFINITY_EXTENDER__HOST": "127.0.0.1",
                "HOSTAFFINITY_EXTENDER__PORT": str(self.listen_ports[name]),
            }
        if service == WEBHOOK:
            self.listen_ports[name] = free_listen_port()
            webhook = WebhookSettings(host="127.0.0.1", port=self.listen_ports[name])
            env |= settings_env("webhook", webhook)
        replica = Replica(
            name=name,
            service=service,
            env=env,
            health_port=health,
            log_dir=self.workdir / "logs",
            clock=self.clock,
            history=self.history,
            api_proxy=api,
            nats_proxies=nats,
            other_proxies=others,
            release=self.release,
        )
        self.replicas[name] = replica

    def _client_ports(self) -> list[int]:
        if isinstance(self.bus, NatsCluster):
            return [ports.client for ports in self.bus.ports]
        return [self.bus.ports.client]

    def _nats_settings(self, service: str, proxy_ports: list[int]) -> NatsSettings:
        """The service's bus settings, its servers being its own proxies."""
        if isinstance(self.bus, NatsCluster):
            urls = [f"tls://127.0.0.1:{port}" for port in proxy_ports]
            return self.bus.settings(service, urls=urls)
        urls = [f"nats://127.0.0.1:{port}" for port in proxy_ports]
        return msgspec.structs.replace(self.bus.settings(service), servers=urls)

    def _vcenter(self, port: int) -> VCenterSettings:
        return VCenterSettings(
            name=VCENTER_NAME,
            host="127.0.0.1",
            port=port,
            username=USERNAME,
            password=PASSWORD,
            protocol="http",
        )

    def _kubeconfig(self, name: str, port: int) -> Path:
        """The double's kubeconfig, its server the replica's own API proxy."""
        path = self.double.write_kubeconfig(self.workdir / f"kubeconfig-{name}")
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    async def stop(self) -> None:
        if self._readiness is not None:
            self._readiness.cancel()
            await asyncio.gather(self._readiness, return_exceptions=True)
        for replica in self.replicas.values():
            await replica.close()
        await self.double.stop()
        await self.bus.stop()
