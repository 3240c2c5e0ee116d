"""`make dev` (scripts/dev.sh) against the Kubernetes double: all five services up and ready, the
six nodes placed, Ctrl-C leaving nothing behind; without a usable cluster, one clear line."""

import asyncio
import socket
from pathlib import Path

import nats
import nats.errors
import pytest
import yaml

from hostaffinity.cli.bus_access import IDENTITY_NAMES
from tests.e2e.dev_world import REPO, DevRun, dev_environment, running_dev
from tests.platform.kube_double import KubeDouble

pytestmark = pytest.mark.timeout(240)


async def test_dev_command_runs_every_service_and_stops_them_all(
    kube_double: KubeDouble, tmp_path: Path
) -> None:
    async with running_dev(kube_double, tmp_path) as dev:
        environment = dev.environment
        for port in ("LABELLER", "DRS", "DESCHEDULER", "EXTENDER", "WEBHOOK"):
            assert f"health on :{environment[f'{port}_HEALTH_PORT']}" in dev.text()
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


def _empty(tmp_path: Path) -> Path:
    (path := tmp_path / "empty-kubeconfig").write_text("", encoding="utf-8")
    return path


def _silent_server(tmp_path: Path, listener: socket.socket) -> Path:
    """A kubeconfig naming a server that accepts connections and never answers."""
    port = listener.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    (path := tmp_path / "silent-kubeconfig").write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _anonymous(kube: KubeDouble, tmp_path: Path) -> Path:
    """A kubeconfig with no credentials: the double takes it as system:anonymous (403)."""
    path = kube.write_kubeconfig(tmp_path / "anonymous-kubeconfig")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["users"][0]["user"] = {}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


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
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        kubeconfig = {
            "no kubeconfig": None,
            "an empty kubeconfig": _empty(tmp_path),
            "a server that does not answer": _silent_server(tmp_path, listener),
            "no permission": _anonymous(kube_double, tmp_path),
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
