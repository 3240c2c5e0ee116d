"""`make dev` (scripts/dev.sh) as the tests run it: ports of its own, its state under the test's
directory, in a session of its own so that whatever it leaves behind can be found.

The Kubernetes double stands in for the user's kind cluster (six Ready nodes, kind's names); it
serves from the test's event loop, so every wait here is asynchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.e2e.descheduler_harness import node_object
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import free_port

REPO = Path(__file__).resolve().parents[2]
KIND_NODES = ["kind-control-plane", "kind-worker", *(f"kind-worker{n}" for n in range(2, 6))]
# "dev: all five services ready (/readyz)", or four and the unregistered webhook up.
READY_LINE = "services ready (/readyz)"


def dev_environment(tmp_path: Path, kubeconfig: Path | None) -> dict[str, str]:
    """The environment of one `make dev`: free ports, state in tmp_path/dev, HOME in tmp_path
    (so ~/.kube/config is the test's), KUBECONFIG only when given."""
    environment = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    environment |= {
        "HOME": str(tmp_path),
        "DEV_STATE": str(tmp_path / "dev"),
        "NATS_PORT": str(free_port()),
        "NATS_MONITOR_PORT": str(free_port()),
        "VCSIM_LISTEN": f"127.0.0.1:{free_port()}",
        "LABELLER_HEALTH_PORT": str(free_port()),
        "EXTENDER_HEALTH_PORT": str(free_port()),
        "DRS_HEALTH_PORT": str(free_port()),
        "DESCHEDULER_HEALTH_PORT": str(free_port()),
        "EXTENDER_PORT": str(free_port()),
        "WEBHOOK_HEALTH_PORT": str(free_port()),
        "WEBHOOK_PORT": str(free_port()),
    }
    if kubeconfig is not None:
        environment["KUBECONFIG"] = str(kubeconfig)
    return environment


def kind_cluster(kube: KubeDouble, tmp_path: Path) -> Path:
    """Six Ready nodes named as kind names them; the kubeconfig that reaches them."""
    for name in KIND_NODES:
        kube.seed(node_object(name))
    return kube.write_kubeconfig(tmp_path / "kubeconfig")


@dataclass
class DevRun:
    """One running scripts/dev.sh: its process (the leader of its own session) and output."""

    process: asyncio.subprocess.Process
    output: Path
    environment: dict[str, str]

    @classmethod
    async def start(
        cls,
        environment: dict[str, str],
        output: Path,
        command: Sequence[str] = ("bash", "scripts/dev.sh"),
        cwd: Path = REPO,
    ) -> DevRun:
        """dev.sh of this checkout, or `command` in `cwd` (the quick start's `make dev` in a
        fresh clone): either way the same session, output and stopping."""
        with output.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=cwd,
                env=environment,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        return cls(process, output, environment)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    async def ready(self, within: float = 120.0) -> None:
        """Until dev.sh says every service answers /readyz; fails if it exits first."""
        deadline = time.monotonic() + within
        while READY_LINE not in self.text():
            assert self.process.returncode is None, self.text()
            assert time.monotonic() < deadline, self.text()
            await asyncio.sleep(0.2)

    async def interrupt(self, within: float = 30.0) -> int:
        """Ctrl-C as a terminal sends it (SIGINT to the whole process group); the exit code."""
        os.killpg(self.process.pid, signal.SIGINT)
        return await asyncio.wait_for(self.process.wait(), within)

    def leftovers(self) -> list[str]:
        """Processes still in dev.sh's session (its services, nats-server, vcsim)."""
        left = []
        for process in psutil.process_iter(["pid", "cmdline", "status"]):
            if process.info["status"] == psutil.STATUS_ZOMBIE:  # exited, not yet reaped
                continue
            try:
                if os.getsid(process.pid) == self.process.pid:
                    left.append(" ".join(process.info["cmdline"] or []))
            except (ProcessLookupError, PermissionError):
                continue
        return left

    async def stop(self) -> None:
        """After a failed test: nothing of this run stays up."""
        if self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            await asyncio.wait_for(self.process.wait(), 30)


@contextlib.asynccontextmanager
async def running_dev(kube: KubeDouble, tmp_path: Path) -> AsyncIterator[DevRun]:
    """`make dev` against six kind-named nodes of the double, from ready until the block ends."""
    environment = dev_environment(tmp_path, kind_cluster(kube, tmp_path))
    dev = await DevRun.start(environment, tmp_path / "dev.out")
    try:
        await dev.ready()
        yield dev
    finally:
        await dev.stop()
