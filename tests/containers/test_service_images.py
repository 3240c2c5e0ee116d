"""The service images as Kubernetes and compose run them, built by scripts/images.sh (`make test`
builds them before pytest): one per folder under services/, small, labelled, non-root.

Each starts with a read-only root file system as uid 65532, answers `--version` and
`--check-config` (with compose.yaml's own environment), and, on the host network against the
test's nats-server (open: identity settings are ignored), vcsim and Kubernetes double, becomes
ready and does its job; SIGTERM then stops it within its drain time with exit 0.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hostaffinity.cli.bus_credentials import write_local_credentials
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.containers.podman import (
    REPO,
    USER,
    Container,
    inspect_image,
    podman,
    run_detached,
    run_once,
    service_image,
    service_version,
    services,
)
from tests.e2e.drs_harness import drs_state, pod_manifest
from tests.e2e.labeller_harness import node_object, vm_by_name
from tests.integration.extender_harness import pod_object
from tests.platform.bus_values import node_placement as placement
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer, free_port
from tests.platform.vcsim import Vcsim, VcsimFactory
from tests.recorded_fixtures import fixture_dir

pytestmark = pytest.mark.timeout(240)

SERVICES = services()
DRAIN_SECONDS = 20.0  # every service's default drain_seconds (runtime ServiceSettings)
READY_WITHIN_SECONDS = 60.0
# What the image adds to its base (the virtualenv): the slim base is ~125 MB, so an image of
# base + this stays under 200 MB.
ADDED_MB_LIMIT = 70
KUBECONFIG_IN_CONTAINER = "/etc/hostaffinity/kubeconfig"
WEBHOOK_CONFIGURATION = (
    REPO / "k8s" / "base" / "admission-webhook" / "mutatingwebhookconfiguration.yaml"
)
NODES = ["node1", "node2", "node3"]
WEB = {"app": "web"}
READY = {"conditions": [{"type": "Ready", "status": "True"}]}


def compose_environment(service: str) -> dict[str, str]:
    """compose.yaml's environment for the service (the anchor merged), as strings."""
    loaded = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))
    entry = loaded["services"].get(service, {})
    return {k: str(v) for k, v in entry.get("environment", {}).items()}


# -- built, small, labelled ----------------------------------------------------------------------


async def test_every_service_has_a_small_non_root_labelled_image() -> None:
    assert SERVICES, "no services/*/pyproject.toml"
    rows = []
    for service in SERVICES:
        image = await inspect_image(service_image(service))
        config: dict[str, Any] = image["Config"]  # type: ignore[assignment]
        labels = config.get("Labels") or {}
        assert config.get("User") == "65532:65532", service
        assert config.get("Entrypoint") == ["hostaffinity-service"], service
        assert labels.get("org.opencontainers.image.version") == service_version(service)
        assert labels.get("org.opencontainers.image.source", "").startswith("https://")
        assert labels.get("org.opencontainers.image.revision", "unknown") != "unknown"
        # What the image adds to its base (the virtualenv).
        base = await inspect_image(labels["org.opencontainers.image.base.name"])
        base_size: int = base["Size"]  # type: ignore[assignment]
        size: int = image["Size"]  # type: ignore[assignment]
        added = size - base_size
        rows.append((service, size, added))
        assert added < ADDED_MB_LIMIT * 1_000_000, (service, added)
    print()
    for service, size, added in rows:
        print(f"{service_image(service)}: {size / 1e6:.0f} MB ({added / 1e6:.0f} MB over its base)")


@pytest.mark.parametrize("service", SERVICES)
async def test_version_and_check_config_read_only_as_65532(service: str, tmp_path: Path) -> None:
    code, out = await run_once(service_image(service), "--version")
    assert (code, out.strip()) == (0, f"hostaffinity-{service} {service_version(service)}"), out
    # compose's environment names the service's nkey seed in the credentials volume.
    credentials = tmp_path / "credentials"
    write_local_credentials(credentials, owner=int(USER))
    code, out = await run_once(
        service_image(service),
        "--check-config",
        env=compose_environment(service),
        mounts={credentials: "/credentials"},
    )
    assert code == 0, out
    code, out = await run_once(
        service_image(service), "--check-config", env={"HOSTAFFINITY_NO_SUCH__KEY": "1"}
    )
    assert code == 2, out
    # The CLI is in every image too (compose's one-shots run it from the node-labeller's).
    code, out = await podman(
        "run", "--rm", "--read-only", "--user", "65532", "--network", "none",
        "--entrypoint", "hostaffinity", service_image(service), "--help", check=False,
    )  # fmt: skip
    assert code == 0, out


# -- running ------------------------------------------------------------------------------------


async def metrics(port: int) -> dict[str, float]:
    """The service's /metrics as sample name (with labels) → value."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        exposed = await response.text()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(exposed):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


async def http_ok(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def until(container: Container, what: str, check: Any, within: float = 30.0) -> None:
    """Until `check()` (sync or async) is true; the container must keep running meanwhile."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if not await container.running():
            raise AssertionError(
                f"{container.name} exited before {what}:\n{await container.logs()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {within:.0f} s:\n{await container.logs()}")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def service_container(
    service: str,
    nats: NatsServer,
    kubeconfig: Path,
    tmp_path: Path,
    settings: Mapping[str, str] = {},
) -> AsyncIterator[tuple[Container, int]]:
    """The service's container, ready (its /readyz answered 200); on leaving the block it gets
    SIGTERM and must exit 0 within its drain time."""
    health = free_port()
    env = {
        "HOSTAFFINITY_NATS__SERVERS": json.dumps([nats.url]),
        "HOSTAFFINITY_KUBERNETES__KUBECONFIG": KUBECONFIG_IN_CONTAINER,
        "HOSTAFFINITY_HEALTH__HOST": "127.0.0.1",
        "HOSTAFFINITY_HEALTH__PORT": str(health),
        "HOSTAFFINITY_LEASE__NAMESPACE": "kube-system",
        **settings,
    }
    if service not in ("node-labeller", "drs-translator", "descheduler"):
        env.pop("HOSTAFFINITY_LEASE__NAMESPACE")
    name = f"hostaffinity-test-{service}-{tmp_path.name}"[:60]
    container = await run_detached(
        name, service_image(service), env=env, mounts={kubeconfig: KUBECONFIG_IN_CONTAINER}
    )
    try:
        started = time.monotonic()
        await until(
            container,
            "readiness",
            lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
            READY_WITHIN_SECONDS,
        )
        print(f"{service}: ready in {time.monotonic() - started:.1f} s")
        yield container, health
        code, took = await container.terminate(within=DRAIN_SECONDS + 10)
        logs = await container.logs()
        assert code == 0, logs
        assert took < DRAIN_SECONDS, (took, logs)
        print(f"{service}: SIGTERM → exit 0 in {took:.1f} s")
    finally:
        await container.remove()


@pytest.fixture
def vc(vcsim: VcsimFactory, kube_double: KubeDouble) -> Vcsim:
    """vcsim with one VM per node (VM i on host i mod 3), and those nodes in the double."""
    started = vcsim(hosts=3, vm_names=NODES)
    for name in NODES:
        kube_double.seed(node_object(name))
    return started


def vcenter_settings(vc: Vcsim) -> dict[str, str]:
    return {
        "HOSTAFFINITY_VCENTERS__0__HOST": vc.host,
        "HOSTAFFINITY_VCENTERS__0__PORT": str(vc.port),
        "HOSTAFFINITY_VCENTERS__0__PROTOCOL": "http",
        "HOSTAFFINITY_VCENTERS__0__USERNAME": vc.username,
        "HOSTAFFINITY_VCENTERS__0__PASSWORD": vc.password,
    }


def host_labels(kube: KubeDouble) -> dict[str, str]:
    labels = {}
    for name in NODES:
        node = kube.read("v1", "nodes", name)
        assert node is not None
        value = (node["metadata"].get("labels") or {}).get(LABEL_ESXI_HOST)
        if value:
            labels[name] = value
    return labels


async def test_node_labeller_labels_the_nodes(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    async with service_container(
        "node-labeller", nats_server, kubeconfig, tmp_path, vcenter_settings(vc)
    ) as (container, _):
        await until(container, "labels on every node", lambda: len(host_labels(kube_double)) == 3)
    assert sorted(host_labels(kube_double).values()) == ["DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"]


async def test_drs_translator_writes_a_rule_into_vcsim(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    si = vc.connect()
    vms = sorted(str(vm_by_name(si, n)._moId) for n in ("node1", "node2"))

    def anti_rules() -> list[list[str]]:
        state = drs_state(si)
        return [
            sorted(v["vm"])
            for v in state.values()
            if v["_type"] == "vim.cluster.AntiAffinityRuleSpec"
            and v["name"].startswith("hostaffinity-")
        ]

    async with (
        service_container(
            "node-labeller", nats_server, kubeconfig, tmp_path / "l", vcenter_settings(vc)
        ) as (labeller, _),
        service_container(
            "drs-translator", nats_server, kubeconfig, tmp_path / "d", vcenter_settings(vc)
        ) as (translator, _),
    ):
        await until(labeller, "labels on every node", lambda: len(host_labels(kube_double)) == 3)
        kube_double.seed(pod_manifest("p1", "node1", WEB, apart_from=WEB))
        kube_double.seed(pod_manifest("p2", "node2", WEB, apart_from=WEB))
        await until(
            translator,
            "an anti-affinity rule in vcsim",
            lambda: asyncio.to_thread(lambda: anti_rules() == [vms]),
        )


async def test_scheduler_extender_answers_a_filter(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus, tmp_path: Path
) -> None:
    topology = await bus.topology()
    for node, host in (("n1", "h1"), ("n2", "h1"), ("n3", "h2")):
        kube_double.seed(node_object(node))
        await topology.put_node(placement(node, host))
    kube_double.seed(pod_object("db", "db", node="n1"))
    kube_double.seed(pod_object("web", "web", avoid="db"))
    extender_port = free_port()
    settings = {
        "HOSTAFFINITY_EXTENDER__HOST": "127.0.0.1",
        "HOSTAFFINITY_EXTENDER__PORT": str(extender_port),
    }
    async with service_container(
        "scheduler-extender", nats_server, kubeconfig, tmp_path, settings
    ) as (container, _):
        # web must avoid db's host h1, so only n3 is left.
        body = {
            "Pod": kube_double.read("v1", "pods", "web", "default"),
            "Nodes": None,
            "NodeNames": ["n1", "n2", "n3"],
        }

        async def filtered() -> bool:
            url = f"http://127.0.0.1:{extender_port}/filter"
            async with aiohttp.ClientSession() as http, http.post(url, json=body) as response:
                assert response.status == 200
                answer = await response.json()
            return bool(answer.get("NodeNames") == ["n3"])

        await until(container, "a filter answer leaving n3 alone", filtered)


async def test_admission_webhook_patches_a_review(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    kube_double.seed(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hostaffinity"}}
    )
    kube_double.seed(yaml.safe_load(WEBHOOK_CONFIGURATION.read_text(encoding="utf-8")))
    webhook_port = free_port()
    settings = {
        "HOSTAFFINITY_WEBHOOK__HOST": "127.0.0.1",
        "HOSTAFFINITY_WEBHOOK__PORT": str(webhook_port),
        "HOSTAFFINITY_WEBHOOK__EXTRA_HOSTNAMES": '["127.0.0.1"]',
    }
    async with service_container(
        "admission-webhook", nats_server, kubeconfig, tmp_path, settings
    ) as (container, _):
        # The caBundle it wrote verifies it; a recorded review comes back patched.
        def written_ca() -> bytes | None:
            stored = kube_double.read(
                "admissionregistration.k8s.io/v1",
                "mutatingwebhookconfigurations",
                "hostaffinity-pod-host-terms",
            )
            assert stored is not None
            bundle = stored["webhooks"][0]["clientConfig"].get("caBundle")
            return None if bundle is None else base64.b64decode(bundle)

        await until(container, "the caBundle written", lambda: written_ca() is not None)
        ca = written_ca()
        assert ca is not None
        fixture = fixture_dir("kube-apiserver-admission") / "pod-create-review.json"
        recorded = json.loads(fixture.read_text())["reviews"][0]["request_body"]
        trust = ssl.create_default_context(cadata=ca.decode())
        url = f"https://127.0.0.1:{webhook_port}/mutate?timeout=2s"

        async def patched() -> bool:
            try:
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(url, json=recorded, ssl=trust) as response,
                ):
                    if response.status != 200:
                        return False
                    answer = (await response.json())["response"]
            except aiohttp.ClientConnectionError:
                return False
            patch = json.loads(base64.b64decode(answer["patch"]))
            assert answer["uid"] == recorded["request"]["uid"]
            assert patch[0]["value"]["topologyKey"] == LABEL_ESXI_HOST
            return True

        await until(container, "a patched review", patched)


async def test_descheduler_runs_a_dry_run_cycle(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus, tmp_path: Path
) -> None:
    topology = await bus.topology()
    for node, host in (("n1", "h1"), ("n2", "h1"), ("n3", "h2")):
        kube_double.seed(node_object(node, status=READY))
        await topology.put_node(placement(node, host))
    # Two replicas that must be on different hosts share h1: one would be evicted, in a dry run.
    kube_double.seed(pod_object("web-1", "web", node="n1", avoid="web", owner="web"))
    kube_double.seed(pod_object("web-2", "web", node="n2", avoid="web", owner="web"))
    settings = {
        "HOSTAFFINITY_DESCHEDULER__DRY_RUN": "true",
        "HOSTAFFINITY_DESCHEDULER__KUBEVIRT": "false",
        "HOSTAFFINITY_DESCHEDULER__COOLDOWN_SECONDS": "0",
    }
    async with service_container("descheduler", nats_server, kubeconfig, tmp_path, settings) as (
        container,
        health,
    ):

        async def dry_run_eviction() -> bool:
            samples = await metrics(health)
            return any(
                name.startswith("hostaffinity_descheduler_pods_evicted")
                and "dry-run" in name
                and value >= 1
                for name, value in samples.items()
            )

        await until(container, "a dry-run eviction in /metrics", dry_run_eviction)
    for name in ("web-1", "web-2"):
        assert kube_double.read("v1", "pods", name, "default") is not None, "a dry run evicted"


# Each service's job, tested in its container above.
JOB_TESTS = {
    "node-labeller": test_node_labeller_labels_the_nodes,
    "drs-translator": test_drs_translator_writes_a_rule_into_vcsim,
    "scheduler-extender": test_scheduler_extender_answers_a_filter,
    "admission-webhook": test_admission_webhook_patches_a_review,
    "descheduler": test_descheduler_runs_a_dry_run_cycle,
}


def test_every_service_image_has_its_job_tested() -> None:
    """A service that lands without a container test of its job fails here, not silently."""
    assert sorted(JOB_TESTS) == sorted(SERVICES)
