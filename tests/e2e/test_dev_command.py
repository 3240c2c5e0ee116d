"""`make dev` (scripts/dev.sh) against the Kubernetes double: seeds vcsim and labels the nodes."""

import asyncio
import os
import signal
import time
from pathlib import Path

import nats
import nats.errors
import pytest

from hostaffinity.cli.bus_access import IDENTITY_NAMES
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import free_port

REPO = Path(__file__).resolve().parents[2]
NODES = ["kind-control-plane", "kind-worker", "kind-worker2"]


async def test_dev_command_labels_a_cluster_without_vsphere(
    kube_double: KubeDouble, tmp_path: Path
) -> None:
    for name in NODES:
        kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    environment = os.environ | {
        "KUBECONFIG": str(kube_double.write_kubeconfig(tmp_path / "kubeconfig")),
        "DEV_STATE": str(tmp_path / "dev"),
        "NATS_PORT": str(nats_port := free_port()),
        "NATS_MONITOR_PORT": str(free_port()),
        "VCSIM_LISTEN": f"127.0.0.1:{free_port()}",
        "LABELLER_HEALTH_PORT": str(free_port()),
        "EXTENDER_HEALTH_PORT": str(free_port()),
        "EXTENDER_PORT": str(free_port()),
        "WEBHOOK_HEALTH_PORT": str(free_port()),
        "WEBHOOK_PORT": str(free_port()),
    }
    output = tmp_path / "dev.out"
    with output.open("wb") as log:
        # The double serves from this event loop: wait for the script without blocking it.
        dev = await asyncio.create_subprocess_exec(
            "bash",
            "scripts/dev.sh",
            cwd=REPO,
            env=environment,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 90
            while not all(_host_label(kube_double, name) for name in NODES):
                assert dev.returncode is None, output.read_text()
                assert time.monotonic() < deadline, output.read_text()
                await asyncio.sleep(0.2)
            hosts = {_host_label(kube_double, name) for name in NODES}
            assert hosts == {"DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"}
            # The local bus has Kubernetes' authorization: identities on file, no anonymous.
            seeds = sorted(p.name for p in (tmp_path / "dev" / "nats").glob("*.nk"))
            assert seeds == sorted(f"{name}.nk" for name in IDENTITY_NAMES)
            with pytest.raises(nats.errors.Error, match=r"(?i)authorization violation"):
                await nats.connect(
                    f"nats://127.0.0.1:{nats_port}", allow_reconnect=False, max_reconnect_attempts=0
                )
        finally:
            os.killpg(dev.pid, signal.SIGTERM)
            await asyncio.wait_for(dev.wait(), 30)


def _host_label(kube: KubeDouble, name: str) -> str | None:
    node = kube.read("v1", "nodes", name)
    return None if node is None else node["metadata"].get("labels", {}).get(LABEL_ESXI_HOST)
