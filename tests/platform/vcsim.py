"""A real vCenter simulator (our build of govmomi 0.24 vcsim), one per call of the `vcsim` factory.

The factory builds `build/vcsim` with scripts/build-vcsim.sh when needed (the script is a no-op
when the binary is newer than tools/vcsim/main.go), starts it on a free loopback port with the
inventory shape the test asks for, and stops it after the test. vcsim writes a file per VM into
its temporary datastore; on tmpfs (/dev/shm) that is twice as fast as on disk, so it is used when
there.

    def test_x(vcsim: VcsimFactory) -> None:
        vc = vcsim(clusters=2, hosts=3, vms=6, maintenance=["DC0_C1_H2"])
        si = vc.connect()                      # pyVmomi ServiceInstance, plain http
        settings = vc.settings()               # VCenterSettings for the product code

`vcsim(tls=identity)` serves https with a `ServingIdentity` (runtime http/certificates.py `issue`):
a CA of the test's own signs vcsim's certificate, as a site's VMCA signs vCenter's; `settings()`
then trusts that CA (`ca_file`) unless told otherwise.

Host names are `DC0_C<c>_H<h>`; VM i (from 0) runs on the i-th host in that order. Beyond govmomi
0.24's simulator, `ReconfigureComputeResource_Task` applies the spec's `dasConfig` (vSphere HA),
as tools/vcsim/main.go says. The vSphere Automation (REST) API is served too, under /rest: tests
make tags there (tests/platform/vcenter_tags.py).
"""

import contextlib
import os
import re
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import SmartConnect
from pyVmomi import vim, vmodl

from hostaffinity.runtime.http.certificates import ServingIdentity
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from tests.kinds import refuse_in_fast_tests

REPO = Path(__file__).resolve().parents[2]
BINARY = REPO / "build" / "vcsim"
BUILD_SCRIPT = REPO / "scripts" / "build-vcsim.sh"
BUILD_TIMEOUT_SECONDS = 900.0  # a first build may install Go and govmomi from Debian
STARTUP_TIMEOUT_SECONDS = 60.0  # 2,000 VMs take 5-15 s on two busy cores
STOP_TIMEOUT_SECONDS = 10.0
USERNAME = "user"
PASSWORD = "pass"
URL_LINE = re.compile(
    r"^VCSIM_URL=((https?)://([^:@/]+):([^@/]*)@([\d.]+):(\d+)/sdk)$", re.MULTILINE
)


class VcsimError(RuntimeError):
    """vcsim did not build or start; the message carries its stderr."""


@dataclass
class Vcsim:
    """A running vcsim: where it listens, how to log in, and a pyVmomi connection on demand."""

    url: str
    host: str
    port: int
    username: str
    password: str
    process: subprocess.Popen[bytes]
    stderr_path: Path
    protocol: str = "http"
    # With TLS: the CA bundle that signed vcsim's certificate.
    ca_file: Path | None = None
    _connections: list[vim.ServiceInstance] = field(default_factory=list)

    def connect(self) -> vim.ServiceInstance:
        """A new logged-in pyVmomi session (over https trusting `ca_file` when vcsim has TLS)."""
        context = None if self.ca_file is None else ssl.create_default_context(cafile=self.ca_file)
        # SmartConnect is unannotated in pyVmomi 9.1; it returns a vim.ServiceInstance.
        si: vim.ServiceInstance = SmartConnect(  # type: ignore[no-untyped-call]
            host=self.host,
            port=self.port,
            user=self.username,
            pwd=self.password,
            protocol=self.protocol,
            sslContext=context,
        )
        self._connections.append(si)
        return si

    def settings(self, **overrides: Any) -> VCenterSettings:
        """Settings for `VCenterSession` pointing at this vcsim; keywords override fields."""
        fields: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "protocol": self.protocol,
        }
        if self.ca_file is not None:
            fields["ca_file"] = str(self.ca_file)
        return VCenterSettings(**(fields | overrides))

    def stderr(self) -> str:
        """What vcsim has logged so far (its request log and any fatal error)."""
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, so vcsim removes its temporary datastore; SIGKILL if it hangs."""
        for si in self._connections:
            si._stub.DropConnections()
        self._connections.clear()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class VcsimFactory:
    """Starts vcsim instances with a given inventory shape; the fixture stops them all."""

    def __init__(self, binary: Path, workdirs: Callable[[], Path]) -> None:
        self.binary = binary
        self.workdirs = workdirs
        self.started: list[Vcsim] = []

    def __call__(
        self,
        *,
        clusters: int = 1,
        hosts: int = 3,
        vms: int = 6,
        vm_prefix: str = "node-",
        vm_names: Sequence[str] = (),
        duplicate_uuid: Sequence[tuple[str, str]] = (),
        rename_host: Mapping[str, str] | None = None,
        maintenance: Sequence[str] = (),
        enter_maintenance_seconds: float = 0.0,
        tls: ServingIdentity | None = None,
        timeout: float = STARTUP_TIMEOUT_SECONDS,
    ) -> Vcsim:
        """Start one vcsim. `vm_names` overrides `vms`/`vm_prefix`; each `duplicate_uuid` pair
        (a, b) gives VM b the BIOS UUID of VM a; `rename_host` maps a host name or moid to a new
        name; `maintenance` lists hosts (name or moid) that start in maintenance mode;
        `enter_maintenance_seconds` > 0 makes EnterMaintenanceMode_Task run that long, reported
        to property collectors as vCenter does (tools/vcsim/main.go); `tls` serves https with
        that certificate."""
        args = [
            "-listen=127.0.0.1:0",
            f"-login={USERNAME}:{PASSWORD}",
            f"-clusters={clusters}",
            f"-hosts={hosts}",
            f"-vms={vms}",
            f"-vm-prefix={vm_prefix}",
        ]
        if vm_names:
            args.append("-vm-names=" + ",".join(vm_names))
        args += [f"-duplicate-uuid={a},{b}" for a, b in duplicate_uuid]
        args += [f"-rename-host={old}={new}" for old, new in (rename_host or {}).items()]
        args += [f"-maintenance={host}" for host in maintenance]
        if enter_maintenance_seconds > 0:
            args.append(f"-enter-maintenance-seconds={enter_maintenance_seconds}")
        workdir = self.workdirs()
        ca_file = None
        if tls is not None:
            ca_file, cert, key = workdir / "ca.crt", workdir / "tls.crt", workdir / "tls.key"
            ca_file.write_bytes(tls.ca_pem)
            cert.write_bytes(tls.cert_pem)
            key.write_bytes(tls.key_pem)
            args += [f"-tls-cert={cert}", f"-tls-key={key}"]
        vc = start_vcsim(self.binary, workdir, args, timeout)
        vc.ca_file = ca_file
        self.started.append(vc)
        return vc


def build_vcsim() -> Path:
    """Run scripts/build-vcsim.sh (cheap when up to date) and return the binary."""
    try:
        result = subprocess.run(
            [str(BUILD_SCRIPT)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise VcsimError(f"{BUILD_SCRIPT} took over {BUILD_TIMEOUT_SECONDS:.0f} s") from err
    if result.returncode != 0 or not BINARY.is_file():
        raise VcsimError(
            f"{BUILD_SCRIPT} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
        )
    return BINARY


def start_vcsim(binary: Path, workdir: Path, args: Sequence[str], timeout: float) -> Vcsim:
    """Start vcsim and wait for its VCSIM_URL line. Output goes to files, not pipes, so a chatty
    vcsim can never block on a full pipe."""
    refuse_in_fast_tests("a vcsim")
    stdout_path, stderr_path = workdir / "vcsim.out", workdir / "vcsim.err"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=os.environ | {"TMPDIR": str(workdir)},
        )
    deadline = time.monotonic() + timeout
    while True:
        match = URL_LINE.search(stdout_path.read_text(errors="replace"))
        if match:
            url, protocol, user, password, host, port = match.groups()
            return Vcsim(
                url=url,
                protocol=protocol,
                host=host,
                port=int(port),
                username=user,
                password=password,
                process=process,
                stderr_path=stderr_path,
            )
        if process.poll() is not None or time.monotonic() > deadline:
            why = (
                f"exited with {process.returncode}"
                if process.returncode is not None
                else f"printed no VCSIM_URL within {timeout:.0f} s"
            )
            if process.returncode is None:
                process.kill()
                process.wait()
            tail = stderr_path.read_text(errors="replace")[-4000:]
            raise VcsimError(f"vcsim {' '.join(args)} {why}; its stderr:\n{tail}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def vcsim_binary() -> Path:
    """build/vcsim, built once per test session when missing or older than main.go."""
    return build_vcsim()


@pytest.fixture
def vcsim(vcsim_binary: Path, tmp_path: Path) -> Iterator[VcsimFactory]:
    """Start vcsim instances with a given inventory shape; all are stopped after the test."""
    with contextlib.ExitStack() as cleanup:

        def workdir() -> Path:
            if os.access("/dev/shm", os.W_OK):
                shm = tempfile.TemporaryDirectory(prefix="vcsim-", dir="/dev/shm")
                return Path(cleanup.enter_context(shm))
            return Path(tempfile.mkdtemp(prefix="vcsim-", dir=tmp_path))

        factory = VcsimFactory(vcsim_binary, workdir)
        try:
            yield factory
        finally:
            for vc in factory.started:
                vc.stop()


@contextlib.contextmanager
def updates_followed(collector: Any) -> Iterator[None]:
    """A client's WaitForUpdatesEx loop on `collector` (with the filters its caller made), kept
    going on a thread while the body runs, as any watching client of vCenter would."""
    done = threading.Event()

    def follow() -> None:
        version = ""
        options = vmodl.query.PropertyCollector.WaitOptions(maxWaitSeconds=1)
        while not done.is_set():
            update = collector.WaitForUpdatesEx(version, options)
            if update is not None:
                version = update.version

    thread = threading.Thread(target=follow, name="updates-followed", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
