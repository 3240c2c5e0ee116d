"""Services as their console scripts run them: ready through the runner, JSON log lines, a
SIGTERM that drains and exits 0 (the scheduler-extender), a lost Lease that ends the
node-labeller's process with status 1 before a rival may take over, and the admission webhook
and the extender each alone in its process, holding only what it needs (RSS printed)."""

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.layout import TOPOLOGY_STREAM
from hostaffinity.schema import utc_timestamp
from tests.e2e.harness import eventually
from tests.platform.console import SCRIPTS
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer, free_port
from tests.platform.vcsim import VcsimFactory
from tests.recorded_fixtures import fixture_dir

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_CONFIGURATION = (
    ROOT / "k8s" / "base" / "admission-webhook" / "mutatingwebhookconfiguration.yaml"
)
REVIEW = fixture_dir("kube-apiserver-admission") / "pod-create-review.json"
LEASE_S = 3.0
RENEW_S = 1.5


async def _ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            return response.status == 200
    except aiohttp.ClientConnectionError:
        return False


def service_environment(
    nats: NatsServer, kube: KubeDouble, tmp_path: Path, **settings: str
) -> dict[str, str]:
    """This environment, pointing a service at the test's nats-server and Kubernetes double."""
    return os.environ | {
        "HOSTAFFINITY_NATS__SERVERS": json.dumps([nats.url]),
        "HOSTAFFINITY_KUBERNETES__KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
        **settings,
    }


@contextlib.asynccontextmanager
async def service_process(
    script: str, environment: Mapping[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The console script running, its output in `log`; killed if it outlives the block."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(SCRIPTS / script), env=environment, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def while_running(
    process: asyncio.subprocess.Process, log: Path, done: Callable[[], Awaitable[bool]]
) -> None:
    """Until `done`; the process must not exit, nor a minute pass, first."""
    deadline = time.monotonic() + 60
    while not await done():
        assert process.returncode is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.1)


async def test_sigterm_drains_and_exits_0_with_json_logs(
    nats_server: NatsServer, kube_double: KubeDouble, tmp_path: Path
) -> None:
    health_port = free_port()
    environment = service_environment(
        nats_server,
        kube_double,
        tmp_path,
        HOSTAFFINITY_HEALTH__HOST="127.0.0.1",
        HOSTAFFINITY_HEALTH__PORT=str(health_port),
        HOSTAFFINITY_EXTENDER__HOST="127.0.0.1",
        HOSTAFFINITY_EXTENDER__PORT=str(free_port()),
        HOSTAFFINITY_LOGGING__FORMAT="json",
    )
    log = tmp_path / "extender.log"
    async with service_process("hostaffinity-scheduler-extender", environment, log) as process:
        await while_running(process, log, lambda: _ready(health_port))
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert code == 0, lines
    messages = [line["message"] for line in lines]
    assert any(m.startswith("scheduler-extender listening on port") for m in messages)
    assert "stopping: finishing requests in flight" in messages
    assert all(line["level"] in ("INFO", "WARNING") for line in lines), lines


async def test_a_labeller_that_loses_its_lease_exits_1_in_time(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, tmp_path: Path
) -> None:
    vc = vcsim(hosts=2, vms=2).settings()
    environment = service_environment(
        nats_server,
        kube_double,
        tmp_path,
        HOSTAFFINITY_HEALTH__PORT=str(free_port()),
        HOSTAFFINITY_VCENTERS__0__HOST=vc.host,
        HOSTAFFINITY_VCENTERS__0__PORT=str(vc.port),
        HOSTAFFINITY_VCENTERS__0__PROTOCOL="http",
        HOSTAFFINITY_VCENTERS__0__USERNAME=vc.username,
        HOSTAFFINITY_VCENTERS__0__PASSWORD=vc.password,
        HOSTAFFINITY_LEASE__NAMESPACE="kube-system",
        HOSTAFFINITY_LEASE__DURATION_SECONDS=str(LEASE_S),
        HOSTAFFINITY_LEASE__RENEW_DEADLINE_SECONDS=str(RENEW_S),
        HOSTAFFINITY_LEASE__RETRY_PERIOD_SECONDS="0.2",
    )
    log = tmp_path / "labeller.log"
    lease: dict[str, Any] | None = None

    async def lease_taken() -> bool:
        nonlocal lease
        lease = kube_double.read(
            "coordination.k8s.io/v1", "leases", "hostaffinity-node-labeller", "kube-system"
        )
        return lease is not None

    async with service_process("hostaffinity-node-labeller", environment, log) as process:
        await while_running(process, log, lease_taken)
        assert lease is not None
        lease["spec"]["holderIdentity"] = "a-rival"
        lease["spec"]["renewTime"] = utc_timestamp()
        kube_double.write(lease)
        usurped = time.monotonic()
        code = await asyncio.wait_for(process.wait(), 30)
        stopped_after = time.monotonic() - usurped
    text = log.read_text()
    assert code == 1, text
    assert "lost the Lease" in text
    # The work was cancelled and the process gone before the rival's lease could run out.
    assert stopped_after < LEASE_S, text


def listening(process: asyncio.subprocess.Process) -> set[int]:
    """The TCP ports the process listens on."""
    connections = psutil.Process(process.pid).net_connections("tcp")
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}


def rss_mib(process: asyncio.subprocess.Process, program: str) -> float:
    """The process's resident memory now, printed for the report (pytest -s shows it)."""
    rss = psutil.Process(process.pid).memory_info().rss / 2**20
    print(f"{program}: RSS after start {rss:.1f} MiB")
    return rss


async def topology_watchers(bus: Bus) -> int:
    """Consumers on the topology bucket's stream: each watch of it is one."""
    return int((await bus.js.stream_info(TOPOLOGY_STREAM)).state.consumer_count)


@dataclass(frozen=True)
class Alone:
    """A service's console script running by itself: the process and the ports it was given."""

    process: asyncio.subprocess.Process
    health_port: int
    port: int


@contextlib.asynccontextmanager
async def alone(
    script: str, section: str, environment: Mapping[str, str], log: Path
) -> AsyncIterator[Alone]:
    """`script` ready, serving its `section` (WEBHOOK, EXTENDER) and health on free ports."""
    health_port, port = free_port(), free_port()
    ports = {
        "HOSTAFFINITY_HEALTH__HOST": "127.0.0.1",
        "HOSTAFFINITY_HEALTH__PORT": str(health_port),
        f"HOSTAFFINITY_{section}__HOST": "127.0.0.1",
        f"HOSTAFFINITY_{section}__PORT": str(port),
    }
    async with service_process(script, {**environment, **ports}, log) as process:
        await while_running(process, log, lambda: _ready(health_port))
        yield Alone(process, health_port, port)


async def watching(kube_double: KubeDouble, kinds: set[str]) -> None:
    """Ready means listed (as an informer's HasSynced does); the watch opens just after."""
    await eventually(lambda: kube_double.store.watched() == kinds, f"watches on exactly {kinds}")


async def test_the_webhook_alone_serves_mutate_and_holds_no_extender_state(
    nats_server: NatsServer, kube_double: KubeDouble, bus: Bus, tmp_path: Path
) -> None:
    kube_double.seed(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hostaffinity"}}
    )
    kube_double.seed(yaml.safe_load(WEBHOOK_CONFIGURATION.read_text()))
    watchers = await topology_watchers(bus)
    environment = service_environment(
        nats_server, kube_double, tmp_path, HOSTAFFINITY_WEBHOOK__EXTRA_HOSTNAMES='["127.0.0.1"]'
    )
    log = tmp_path / "webhook.log"
    async with alone("hostaffinity-admission-webhook", "WEBHOOK", environment, log) as webhook:
        review = json.loads(REVIEW.read_text())["reviews"][0]["request_body"]
        url = f"https://127.0.0.1:{webhook.port}/mutate"
        # Not verified here: tests/integration/test_webhook.py checks the certificate.
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, json=review, ssl=False) as answer,
        ):
            assert answer.status == 200
            assert (await answer.json())["response"]["patchType"] == "JSONPatch"
        # Its own two ports; of the API the pods (the twinless-pod reporter, the host headroom)
        # and the nodes (the hosts a pod may use, for the headroom warning); no topology.
        assert listening(webhook.process) == {webhook.health_port, webhook.port}
        await watching(kube_double, {"pods", "nodes"})
        assert await topology_watchers(bus) == watchers
        rss_mib(webhook.process, "admission-webhook")


async def test_the_extender_alone_opens_no_webhook_port(
    nats_server: NatsServer, kube_double: KubeDouble, bus: Bus, tmp_path: Path
) -> None:
    watchers = await topology_watchers(bus)
    environment = service_environment(nats_server, kube_double, tmp_path)
    log = tmp_path / "extender.log"
    async with alone("hostaffinity-scheduler-extender", "EXTENDER", environment, log) as extender:
        assert listening(extender.process) == {extender.health_port, extender.port}
        await watching(kube_double, {"pods", "nodes", "namespaces"})
        assert await topology_watchers(bus) == watchers + 1
        rss_mib(extender.process, "scheduler-extender")
