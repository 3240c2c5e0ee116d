"""`make dev` (scripts/dev.sh) against the Kubernetes double: all five services up and ready, the
six nodes placed, Ctrl-C leaving nothing behind; without a usable cluster, one clear line."""

import asyncio
from pathlib import Path

import aiohttp
import nats
import nats.errors
import pytest

from hostaffinity.cli.bus_access import IDENTITY_NAMES
from tests.e2e.dev_world import REPO, DevRun, dev_environment, running_dev
from tests.platform.kube_double import KubeDouble
from tests.platform.unusable_access import (
    anonymous_kubeconfig,
    empty_kubeconfig,
    kubeconfig_for,
    silent_listener,
)

pytestmark = pytest.mark.timeout(240)


async def test_dev_command_runs_every_service_and_stops_them_all(
    kube_double: KubeDouble, tmp_path: Path
) -> None:
    async with running_dev(kube_double, tmp_path) as dev:
        environment = dev.environment
        for port in ("LABELLER", "DRS", "DESCHEDULER", "EXTENDER", "WEBHOOK"):
            assert f"health on :{environment[f'{port}_HEALTH_PORT']}" in dev.text()
        # No DEV_WEBHOOK_URL: nothing registers the webhook, so kube-apiserver could not call it.
        assert "four services ready (/readyz); the admission webhook is up but not" in dev.text()
        webhook_health = f"http://127.0.0.1:{environment['WEBHOOK_HEALTH_PORT']}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{webhook_health}/healthz") as alive:
                assert alive.status == 200
            async with http.get(f"{webhook_health}/readyz") as readiness:
                first_line = (await readiness.text()).splitlines()[0]
                assert (readiness.status, first_line) == (503, "not ready: webhook registered")
        state = tmp_path / "dev"
        topology = await asyncio.create_subprocess_exec(
            *(str(REPO / ".venv/bin/hostaffinity"), "topology", "--timeout", "30"),
            *("--nats", f"nats://127.0.0.1:{environment['NATS_PORT']}"),
            *("--nats-seed", str(state / "nats" / "cli.nk")),
            env=environment,
            stdout=asyncio.subprocess.PIPE,
        )
        shown = (await topology.communicate())[0].decode()
        assert topology.returncode == 0, shown
        assert "3 ESXi hosts, 6 placed nodes, 0 with no known host" in shown, shown
        # The local bus has Kubernetes' authorization: identities on file, no anonymous.
        seeds = sorted(p.name for p in (state / "nats").glob("*.nk"))
        assert seeds == sorted(f"{name}.nk" for name in IDENTITY_NAMES)
        with pytest.raises(nats.errors.Error, match=r"(?i)authorization violation"):
            await nats.connect(
                f"nats://127.0.0.1:{environment['NATS_PORT']}",
                allow_reconnect=False,
                max_reconnect_attempts=0,
            )
        await dev.interrupt()
        assert dev.leftovers() == []
        assert dev.text().rstrip().endswith("dev: stopped"), dev.text()


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("no kubeconfig", "no kubeconfig: {home}/.kube/config (the default) does not exist"),
        ("an empty kubeconfig", "the kubeconfig {kubeconfig} names no cluster (no contexts)"),
        # https: the TLS handshake never ends, so the connection time-out (3 s) says it.
        (
            "a server that does not answer",
            "did not complete a connection (TCP and TLS handshake) within 3 s",
        ),
        ("no permission", "refused to list nodes for this kubeconfig's user (403 Forbidden)"),
    ],
)
async def test_dev_command_without_a_usable_cluster_says_what_is_missing(
    case: str, says: str, kube_double: KubeDouble, tmp_path: Path
) -> None:
    with silent_listener() as port:
        kubeconfig = {
            "no kubeconfig": None,
            "an empty kubeconfig": empty_kubeconfig(tmp_path),
            "a server that does not answer": kubeconfig_for(tmp_path, f"https://127.0.0.1:{port}"),
            "no permission": anonymous_kubeconfig(kube_double, tmp_path),
        }[case]
        dev = await DevRun.start(dev_environment(tmp_path, kubeconfig), tmp_path / "dev.out")
        try:
            code = await asyncio.wait_for(dev.process.wait(), 30)
        finally:
            await dev.stop()
    text = dev.text()
    assert code != 0, text
    assert says.format(home=tmp_path, kubeconfig=kubeconfig) in text, text
    assert "kind create cluster" in text, text
    assert "docker compose up" in text, text
    assert "Traceback" not in text, text
    assert len(text.strip().splitlines()) == 1, text
    assert dev.leftovers() == []
