"""The whole system on loopback: the shipped 3-server NATS cluster (R3, TLS, one nkey identity
per service), vcsim with two clusters, the recording API double served from this event loop,
two replicas of each leader-elected service, two admission-webhook replicas that the double calls
for every pod created through it (the shipped MutatingWebhookConfiguration, its caBundle written
by the replicas) and one scheduler-extender that the workload's scheduler calls, each its own
process behind its own proxies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import yaml
from pyVmomi import vim

from hostaffinity.admission_webhook.config import WebhookSettings
from hostaffinity.runtime.process.config import HealthSettings, KubernetesSettings
from hostaffinity.runtime.vcenter.session import VCenterSettings
from hostaffinity.schema import install_token
from tests.campaign.history import AdmissionCall, Clock, History
from tests.campaign.processes import Replica, settings_env
from tests.campaign.recording import AttributedProxy, Connections, RecordingDouble, VcenterProxy
from tests.e2e.harness import FAST_LEASE
from tests.platform.kube_double.webhooks import WebhookCall
from tests.platform.nats import free_listen_port
from tests.platform.nats_cluster import NatsCluster
from tests.platform.vcsim import PASSWORD, USERNAME, Vcsim, build_vcsim, start_vcsim

LEADER_ELECTED: Final = ("node-labeller", "drs-translator", "descheduler")
WEBHOOK: Final = "admission-webhook"
EXTENDER: Final = "scheduler-extender"
# The webhook configuration and the namespace of our services, as k8s/base ships them.
WEBHOOK_CONFIGURATION: Final = (
    Path(__file__).resolve().parents[2]
    / "k8s/base/admission-webhook/mutatingwebhookconfiguration.yaml"
)
SERVICES_NAMESPACE: Final = "hostaffinity"
CLUSTERS: Final = 2
HOSTS_PER_CLUSTER: Final = 3
NODE_VMS: Final = 8
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


class System:
    """Everything a campaign runs; `replicas` by name (`descheduler-a`, ...)."""

    def __init__(self, workdir: Path, history: History, clock: Clock) -> None:
        self.workdir = workdir
        self.history = history
        self.clock = clock
        self.connections = Connections()
        self.nats = NatsCluster(workdir / "bus")
        self.double = RecordingDouble(history, clock, self.connections)
        self.vcsim_port = free_listen_port()
        self.vcsim: Vcsim | None = None
        self.replicas: dict[str, Replica] = {}
        self.listen_ports: dict[str, int] = {}  # replica -> its webhook or extender port
        self._webhooks_ready: set[str] = set()
        self._readiness: asyncio.Task[None] | None = None
        self._vcsim_dir = Path(tempfile.mkdtemp(prefix="campaign-vcsim-", dir=_scratch()))
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    # -- vcsim -------------------------------------------------------------------------------

    def start_vcsim(self) -> Vcsim:
        """vcsim on its fixed port, with its initial inventory (a restart loses every change)."""
        args = [
            f"-listen=127.0.0.1:{self.vcsim_port}",
            f"-login={USERNAME}:{PASSWORD}",
            f"-clusters={CLUSTERS}",
            f"-hosts={HOSTS_PER_CLUSTER}",
            f"-vms={NODE_VMS}",
            "-vm-prefix=node-",
        ]
        self.vcsim = start_vcsim(build_vcsim(), self._vcsim_dir, args, 60)
        return self.vcsim

    def kill_vcsim(self) -> None:
        assert self.vcsim is not None
        self.vcsim.process.kill()
        self.vcsim.process.wait()
        self.vcsim.stop()

    def admin(self) -> vim.ServiceInstance:
        assert self.vcsim is not None
        return self.vcsim.connect()

    # -- the services ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.nats.start()
        await self.nats.provision()
        self.start_vcsim()
        await self.double.start()
        # The services' own namespace (the admission webhook keeps its certificate there), and
        # the webhook configuration the replicas write their CA into.
        self.double.seed(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVICES_NAMESPACE}}
        )
        self.double.seed(yaml.safe_load(WEBHOOK_CONFIGURATION.read_text(encoding="utf-8")))
        self.double.call_webhooks(self.webhook_endpoints, self._admitted)
        for service in (*LEADER_ELECTED, WEBHOOK):
            for suffix in ("a", "b"):
                await self._add(service, suffix)
        await self._add(EXTENDER, "a")
        for replica in self.replicas.values():
            await replica.start()
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

    @property
    def install(self) -> str:
        """The install token the services derive for this cluster (its kube-system UID)."""
        namespace = self.double.read("v1", "namespaces", "kube-system")
        assert namespace is not None
        return install_token(namespace["metadata"]["uid"])

    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.listen_ports[f'{EXTENDER}-a']}"

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
        name = f"{service}-{suffix}"
        replica: Replica | None = None

        def identity() -> str:
            return replica.identity if replica is not None else ""

        def proxy(port: int) -> AttributedProxy:
            return AttributedProxy(("127.0.0.1", port), self.connections, identity)

        api = proxy(int(self.double.url.rsplit(":", 1)[1]))
        nats = [proxy(ports.client) for ports in self.nats.ports]
        others: list[AttributedProxy] = []
        for each in (api, *nats):
            await each.start()
        urls = [f"tls://127.0.0.1:{p.port}" for p in nats]
        health = free_listen_port()
        env = {
            **settings_env("nats", self.nats.settings(service, urls=urls)),
            **settings_env("health", HealthSettings(host="127.0.0.1", port=health)),
            **settings_env(
                "kubernetes", KubernetesSettings(kubeconfig=str(self._kubeconfig(name, api.port)))
            ),
            "HOSTAFFINITY_DRAIN_SECONDS": "2",
            **SERVICE_SETTINGS[service],
        }
        if service in LEADER_ELECTED:
            env |= settings_env("lease", FAST_LEASE)
        if service in ("node-labeller", "drs-translator"):
            vcenter_port = self.vcsim_port
            if service == "drs-translator":
                watched = VcenterProxy(
                    ("127.0.0.1", self.vcsim_port),
                    self.connections,
                    identity,
                    self.history,
                    self.clock,
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
        )
        self.replicas[name] = replica

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
        if self.vcsim is not None:
            self.vcsim.stop()
        await self.nats.stop()
        shutil.rmtree(self._vcsim_dir, ignore_errors=True)


def _scratch() -> str | None:
    """/dev/shm when writable (vcsim writes a file per VM; tmpfs is twice as fast)."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


@contextlib.asynccontextmanager
async def running_system(workdir: Path, history: History, clock: Clock) -> AsyncIterator[System]:
    system = System(workdir, history, clock)
    try:
        await system.start()
        yield system
    finally:
        await system.stop()


def dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
