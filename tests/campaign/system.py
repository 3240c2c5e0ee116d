"""The whole campaign on loopback: one vcsim with two clusters, and two installs of hostaffinity
(two Kubernetes clusters, install.py) whose node VMs share its hosts, each with its own API
double, bus and service replicas."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from pyVmomi import vim

from tests.campaign.history import Clock, History
from tests.campaign.install import LEADER_ELECTED, SHAPES, Install, Shape
from tests.campaign.processes import THIS_RELEASE, Release, Replica
from tests.platform.nats import free_listen_port
from tests.platform.nats_cluster import ServerProcess
from tests.platform.vcsim import PASSWORD, USERNAME, Vcsim, build_vcsim, start_vcsim

CLUSTERS: Final = 2
HOSTS_PER_CLUSTER: Final = 3
# How long the proxy of a drs-translator waits for vCenter to say which rules a reconfigure
# addresses by key before it lets the call through unresolved.
RULE_NAMES_TIMEOUT_S: Final = 5.0
T = TypeVar("T")


class AdminSession:
    """One admin pyVmomi session of the campaign's own, opened again after vcsim went away;
    one call at a time (pyVmomi blocks: run it in a thread)."""

    def __init__(self, connect: Callable[[], vim.ServiceInstance]) -> None:
        self._connect = connect
        self._si: vim.ServiceInstance | None = None
        self._lock = threading.Lock()

    def call(self, read: Callable[[vim.ServiceInstance], T]) -> T:
        with self._lock:
            try:
                if self._si is None:
                    self._si = self._connect()
                return read(self._si)
            except Exception:
                self._si = None
                raise


class System:
    """Everything a campaign runs: vcsim and the installs (the first is the full one)."""

    def __init__(
        self,
        workdir: Path,
        histories: list[History],
        clock: Clock,
        first_release: Release = THIS_RELEASE,
    ) -> None:
        self.workdir = workdir
        self.clock = clock
        self.vcsim_port = free_listen_port()
        self.vcsim: Vcsim | None = None
        self._vcsim_dir = Path(tempfile.mkdtemp(prefix="campaign-vcsim-", dir=_scratch()))
        self._rules = AdminSession(self.admin)
        self.installs = [
            Install(
                shape,
                _folder(workdir, shape),
                history,
                clock,
                self.vcsim_port,
                self._rule_names,
                # The upgrade fault's install starts on the previous release; the other stays
                # on this tree's.
                first_release if shape.full else THIS_RELEASE,
            )
            for shape, history in zip(SHAPES, histories, strict=True)
        ]

    @property
    def first(self) -> Install:
        return self.installs[0]

    @property
    def replicas(self) -> dict[str, Replica]:
        """Every install's replicas by name (their names differ by the install's prefix)."""
        return {name: r for install in self.installs for name, r in install.replicas.items()}

    # -- vcsim -------------------------------------------------------------------------------

    def start_vcsim(self) -> Vcsim:
        """vcsim on its fixed port, with its initial inventory (a restart loses every change):
        each install's node VMs, the i-th VM of all on the i-th host (mod the host count), so
        both installs have VMs on every host."""
        names = [name for install in self.installs for name in install.shape.vm_names]
        args = [
            f"-listen=127.0.0.1:{self.vcsim_port}",
            f"-login={USERNAME}:{PASSWORD}",
            f"-clusters={CLUSTERS}",
            f"-hosts={HOSTS_PER_CLUSTER}",
            f"-vm-names={','.join(names)}",
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

    async def _rule_names(self, cluster_moid: str) -> dict[int, str] | None:
        """The cluster's DRS rules by key, as vCenter holds them now; None if it did not say."""

        def read(si: vim.ServiceInstance) -> dict[int, str]:
            config: Any = vim.ClusterComputeResource(cluster_moid, si._stub).configurationEx
            return {rule.key: rule.name for rule in config.rule or ()}

        try:
            async with asyncio.timeout(RULE_NAMES_TIMEOUT_S):
                return await asyncio.to_thread(self._rules.call, read)
        except Exception:  # vcsim away (restarted by the campaign), or too slow to answer
            return None

    # -- what faults hit -----------------------------------------------------------------------

    def install_of(self, target: str) -> Install:
        """The install a fault's target belongs to (by its prefix)."""
        prefixed = [i for i in self.installs[1:] if target.startswith(i.shape.prefix)]
        return prefixed[0] if prefixed else self.first

    @property
    def nats_servers(self) -> dict[str, ServerProcess]:
        return {name: s for install in self.installs for name, s in install.nats_servers.items()}

    @property
    def leader_elected(self) -> list[str]:
        """Each install's leader-elected services, as pause-leader targets them."""
        return [f"{i.shape.prefix}{service}" for i in self.installs for service in LEADER_ELECTED]

    @property
    def apis(self) -> list[str]:
        """Each install's API double, as an API fault targets it."""
        return [f"{install.shape.prefix}api" for install in self.installs]

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.start_vcsim()
        for install in self.installs:
            await install.start()

    async def stop(self) -> None:
        for install in self.installs:
            await install.stop()
        if self.vcsim is not None:
            self.vcsim.stop()
        shutil.rmtree(self._vcsim_dir, ignore_errors=True)


def _folder(workdir: Path, shape: Shape) -> Path:
    """Where an install keeps its bus, kubeconfigs and logs: the first in the campaign's own
    workdir (as before there were two), the others in a folder named for them."""
    return workdir if shape.full else workdir / shape.name


def _scratch() -> str | None:
    """/dev/shm when writable (vcsim writes a file per VM; tmpfs is twice as fast)."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


@contextlib.asynccontextmanager
async def running_system(
    workdir: Path, histories: list[History], clock: Clock, first_release: Release = THIS_RELEASE
) -> AsyncIterator[System]:
    system = System(workdir, histories, clock, first_release)
    try:
        await system.start()
        yield system
    finally:
        await system.stop()
