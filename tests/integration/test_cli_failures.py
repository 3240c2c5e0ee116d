"""Every `hostaffinity` command against every way what it reads can be missing: one line on
stderr naming the cause and the remedy, exit 1, within 10 s, no traceback, no asyncio noise.

Commands x failures, where the failure applies: a command that never reads the bus is not
run without NATS. Everything else is healthy (the Kubernetes double, a provisioned
nats-server), so the line must name the one thing that is wrong. Commands run as main() runs,
in a thread (tests/integration/cli_runner.py); progress lines of reads that succeeded (a
`what-if` must read the topology before it knows a host is unknown) are not failure lines.
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.descheduler_harness import node_object, pod_object
from tests.integration.cli_runner import exit_code
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.unusable_access import (
    anonymous_kubeconfig,
    broken_kubeconfig,
    closed_port,
    empty_kubeconfig,
    kubeconfig_for,
    silent_listener,
)

WITHIN_SECONDS = 10.0
PROGRESS = re.compile(r"^reading .+ \.\.\. \d+ in \d+\.\d s$")
FIX_KUBECONFIG = "--kubeconfig"
GET_A_CLUSTER = "kind create cluster"


@dataclass(frozen=True)
class Failure:
    """What is wrong, the words that must name it, and the words of the remedy."""

    cause: str
    fix: str


KUBE = {
    "no kubeconfig": Failure("no kubeconfig: {home}/.kube/config (the default)", FIX_KUBECONFIG),
    "empty kubeconfig": Failure("names no cluster (no contexts)", FIX_KUBECONFIG),
    "broken kubeconfig": Failure("cannot be read", FIX_KUBECONFIG),
    "API refuses": Failure("cannot be reached", "the kubeconfig's server (or --server)"),
    "API silent": Failure("accepted the connection but did not answer within 5 s", "--server"),
    "API forbids": Failure("(403 Forbidden", "use a kubeconfig whose user may read"),
}  # fmt: skip
BUS = {
    "no NATS": Failure("cannot reach NATS at nats://127.0.0.1:", "--nats URL"),
    "unprovisioned bus": Failure(
        "the bus is not provisioned: stream HOSTAFFINITY_EVENTS missing; stream HOSTAFFINITY_DLQ "
        "missing; stream KV_hostaffinity-topology missing; stream KV_hostaffinity-drs missing",
        "run `hostaffinity bus provision`",
    ),
}


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    failures: tuple[str, ...]
    # The same command asking for something that does not exist, and what it then says.
    missing: tuple[str, ...] = ()
    missing_says: Failure | None = None
    # The remedy for an unusable kubeconfig or API, where the command has its own.
    kube_fix: str | None = None


READERS = (*KUBE, *BUS)  # commands that read the cluster and the bus
NO_POD = Failure("pod default/nope does not exist", "kubectl get pods -n default")
NO_NODE = Failure("node nope does not exist", "kubectl get nodes")
NO_HOST = Failure("no ESXi host named esx-nope", "hostaffinity topology")
COMMANDS = {
    "topology": Command(("topology",), READERS),
    "exposure": Command(("exposure",), READERS),
    "what-if": Command(
        ("what-if", "maintenance", "esx-a"), (*READERS, "missing object"),
        ("what-if", "maintenance", "esx-nope"), NO_HOST,
    ),
    "explain pod": Command(
        ("explain", "pod", "default/web-1"), (*READERS, "missing object"),
        ("explain", "pod", "default/nope"), NO_POD,
    ),
    "explain node": Command(
        ("explain", "node", "node-1"), (*READERS, "missing object"),
        ("explain", "node", "nope"), NO_NODE,
    ),
    "status": Command(("status",), READERS),
    "events": Command(("events",), tuple(BUS)),
    "demo": Command(("demo",), READERS),
    "seed-vcsim": Command(("seed-vcsim", "--vcenter", "http://u:p@127.0.0.1:9/sdk"), tuple(KUBE)),
    "bus secrets": Command(("bus", "secrets"), tuple(KUBE)),
    "bus provision": Command(("bus", "provision"), ("no NATS",)),
    "check-cluster": Command(("check-cluster",), tuple(KUBE), kube_fix=GET_A_CLUSTER),
}  # fmt: skip
READS_KUBERNETES = {name for name, command in COMMANDS.items() if set(KUBE) & set(command.failures)}
TAKES_NATS = {"topology", "exposure", "what-if", "explain pod", "explain node", "status",
              "events", "demo"}  # fmt: skip
MATRIX = [(name, failure) for name, command in COMMANDS.items() for failure in command.failures]


@pytest.fixture
def healthy(kube_double: KubeDouble, kubeconfig: Path) -> Path:
    """The objects the commands ask about, so only the case's failure is missing."""
    kube_double.seed(node_object("node-1"))
    kube_double.seed(pod_object("web-1", "web", "node-1", owner="web-rs", affinity=None))
    return kubeconfig


def command_line(
    name: str, argv: tuple[str, ...], kubeconfig: Path | None, nats: str, tmp_path: Path
) -> list[str]:
    line = list(argv)
    if kubeconfig is not None and name in READS_KUBERNETES:
        line += ["--kubeconfig", str(kubeconfig)]
    if name in TAKES_NATS:
        line += ["--nats", nats]
    if name == "bus provision":
        config = tmp_path / "shared.yaml"
        config.write_text(f'nats:\n  servers: ["{nats}"]\n', encoding="utf-8")
        line += ["--config", str(config)]
    return line


@pytest.mark.parametrize(("name", "failure"), MATRIX, ids=[f"{n}: {f}" for n, f in MATRIX])
async def test_a_command_says_in_one_line_what_is_missing(
    name: str,
    failure: str,
    healthy: Path,
    kube_double: KubeDouble,
    nats_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = COMMANDS[name]
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig: Path | None = healthy
    nats, argv, expected = nats_server.url, command.argv, {**KUBE, **BUS}.get(failure)
    with silent_listener() as silent_port:
        if failure == "no kubeconfig":
            kubeconfig = None
        elif failure == "empty kubeconfig":
            kubeconfig = empty_kubeconfig(tmp_path)
        elif failure == "broken kubeconfig":
            kubeconfig = broken_kubeconfig(tmp_path)
        elif failure == "API refuses":
            kubeconfig = kubeconfig_for(tmp_path, f"http://127.0.0.1:{closed_port()}")
        elif failure == "API silent":
            kubeconfig = kubeconfig_for(tmp_path, f"http://127.0.0.1:{silent_port}")
        elif failure == "API forbids":
            kubeconfig = anonymous_kubeconfig(kube_double, tmp_path)
        elif failure == "no NATS":
            nats = f"nats://127.0.0.1:{closed_port()}"
        elif failure == "unprovisioned bus":
            await nats_server.restart(keep_store=False)  # every stream and bucket gone
        elif failure == "missing object":
            argv, expected = command.missing, command.missing_says
        line = command_line(name, argv, kubeconfig, nats, tmp_path)
        capsys.readouterr()
        started = time.monotonic()
        code = await asyncio.to_thread(exit_code, line)
        elapsed = time.monotonic() - started
        gc.collect()  # an unclosed session or a destroyed task says so when collected
        err = capsys.readouterr().err

    assert expected is not None
    lines = [text for text in err.splitlines() if text.strip() and not PROGRESS.match(text)]
    assert code == 1, err
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    assert lines[0].startswith(f"hostaffinity {line[0]}: "), err
    assert expected.cause.format(home=tmp_path) in lines[0], err
    fix = command.kube_fix if failure in KUBE and command.kube_fix else expected.fix
    assert fix in lines[0], err
    assert elapsed < WITHIN_SECONDS, f"{elapsed:.1f} s: {err}"
