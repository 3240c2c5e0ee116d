"""Every `hostaffinity` command against every way what it needs can be missing: one line on
stderr naming the cause and the remedy, a non-zero exit (1; 2 for a usage error), within 10 s,
no traceback, no asyncio noise.

The commands come from the CLI's own parser (`command_parsers`), so a new command without a row
here fails `test_every_command_has_a_row`; what each command must be run without follows from
the options it takes (`--kubeconfig`: every unusable Kubernetes access; `--nats` or
`--connect-timeout`: no NATS; `--vcenter`: an unusable vCenter; a default path relative to the
working directory: being run outside the repository; every command: an option it does not
know). Everything else is healthy (the Kubernetes double, a provisioned nats-server, vcsim where
the command logs in to vCenter), so the line must name the one thing that is wrong. Commands
run as main() runs, in a thread (tests/integration/cli_runner.py), from an empty folder;
progress lines of reads that succeeded (a `what-if` must read the topology before it knows a
host is unknown) are not failure lines.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from hostaffinity.cli.bus_credentials import public_key, write_local_credentials
from hostaffinity.cli.bus_subscribers import LocalSubscribers, Subscriber
from hostaffinity.cli.fleet_registry import HubFolder
from hostaffinity.cli.main import command_line, command_parsers
from hostaffinity.schema import DRS_BUCKET, DrsOwnership, drs_rule_key
from tests.e2e.descheduler_harness import node_object, pod_object
from tests.platform.console import exit_code
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
from tests.platform.vcsim import VcsimFactory

WITHIN_SECONDS = 10.0
PROGRESS = re.compile(r"^reading .+ \.\.\. \d+ in \d+\.\d s$")
FIX_KUBECONFIG = "--kubeconfig"
GET_A_CLUSTER = "kind create cluster"
PARSERS = command_parsers(command_line())


@dataclass(frozen=True)
class Failure:
    """What is wrong, the words that must name it, the words of the remedy, the exit status."""

    cause: str
    fix: str
    code: int = 1


KUBE = {
    "no kubeconfig": Failure("no kubeconfig: {home}/.kube/config (the default)", FIX_KUBECONFIG),
    "empty kubeconfig": Failure("names no cluster (no contexts)", FIX_KUBECONFIG),
    "broken kubeconfig": Failure("cannot be read", FIX_KUBECONFIG),
    "API refuses": Failure("cannot be reached", "the kubeconfig's server (or --server)"),
    "API silent": Failure("accepted the connection but did not answer within 5 s", "--server"),
    "API forbids": Failure("(403 Forbidden", "use a kubeconfig whose user may read"),
}  # fmt: skip
BUS = {
    "no NATS": Failure("cannot reach NATS at nats://127.0.0.1:", "start NATS or pass --nats URL"),
    "unprovisioned bus": Failure(
        "the bus is not provisioned: stream HOSTAFFINITY_EVENTS missing; stream HOSTAFFINITY_DLQ "
        "missing; stream KV_hostaffinity-topology missing; stream KV_hostaffinity-drs missing",
        "run `hostaffinity bus provision`",
    ),
}
VCENTER = {
    "vCenter refuses connections": Failure(
        "cannot reach vCenter at http://127.0.0.1:{port} (Connection refused)", "--vcenter"
    ),
    "vCenter silent": Failure(
        "vCenter at http://127.0.0.1:{port} accepted the connection but did not answer within 5 s",
        "--vcenter",
    ),
    "vCenter refuses the login": Failure(
        "vCenter http://127.0.0.1:{port} refused the login of 'user'", "password"
    ),
}
OUTSIDE = {
    "outside the repository": Failure(
        "no local bus credentials in .cache/dev/nats (the default --dir, under {cwd})",
        "pass --dir DIR",
    ),
}
USAGE = {
    "unknown option": Failure(
        "unrecognized arguments: --no-such-option", "see `hostaffinity {name} --help`", code=2
    ),
}
# What a command must be run without, by the options it takes.
NEEDS = {
    "--kubeconfig": tuple(KUBE),
    "--nats": ("no NATS",),
    "--connect-timeout": ("no NATS",),
    "--vcenter": tuple(VCENTER),
}
NAMESPACE = "hostaffinity"
NO_SUCH_PID = 4_194_304  # PID_MAX_LIMIT of 64-bit Linux: no process ever has it


@dataclass(frozen=True)
class Command:
    """A command as it runs when all it needs is there, and what it is run without."""

    argv: tuple[str, ...]
    failures: tuple[str, ...]
    # The same command given something else, and what it then says: an object that does not
    # exist ("missing object"), a value it refuses ("bad value").
    variants: Mapping[str, tuple[tuple[str, ...], Failure]] = field(default_factory=dict)
    # The remedy for an unusable kubeconfig or API, where the command has its own.
    kube_fix: str | None = None
    # Where Kubernetes is one of two places the command works on: the options that choose it.
    kube_argv: tuple[str, ...] = ()
    # The remedy for no NATS, where the command is told where NATS is otherwise than by --nats.
    nats_fix: str | None = None


READERS = (*KUBE, *BUS, *USAGE)  # commands that read the cluster and the bus
VCENTER_URL = "http://user:pass@127.0.0.1:{port}/sdk"
NO_POD = Failure("pod default/nope does not exist", "kubectl get pods -n default")
NO_NODE = Failure("node nope does not exist", "kubectl get nodes")
NO_HOST = Failure("no ESXi host named esx-nope", "hostaffinity topology")
BAD_VCENTER_URL = Failure("expected a URL like http://user:pass@host:8989/sdk", "--vcenter")
# In Kubernetes, the consumer is made as provisioning with the seed given (kube_double's
# namespace has no subscriber Secrets: the commands fail before they would read one).
SUBSCRIBER_KUBE = ("--namespace", NAMESPACE, "--nats-seed", "{local_bus}/provision.nk")
# The fleet's commands on the hub's side work in the hub's folder `hub-credentials` makes (made
# in the working directory for each of their rows); the readers read the install's own bus,
# here a bus that joined no fleet.
HUB = "hub"
JOIN = ("fleet", "join", "east", "--cluster", "east", "--hub", "tls://hub.example.com:7422")
NO_HUB_FOLDER = Failure(
    "no-hub is not the hub's folder: no-hub/fleet-provision.nk",
    "fleet hub-credentials --dir no-hub",
)
NO_FLEET_VIEW = Failure("this bus has no fleet view", "join the install to a fleet")
FLEET_READERS = ("no NATS", *USAGE)
COMMANDS = {
    "topology": Command(("topology",), READERS),
    "exposure": Command(("exposure",), READERS, {
        "bad value": (("exposure", "--min-replicas", "1"),
                      Failure("argument --min-replicas: 1", "give 2 or more", code=2)),
    }),
    "what-if maintenance": Command(("what-if", "maintenance", "esx-a"), READERS, {
        "missing object": (("what-if", "maintenance", "esx-nope"), NO_HOST),
    }),
    "what-if host-failure": Command(("what-if", "host-failure", "esx-a"), READERS, {
        "missing object": (("what-if", "host-failure", "esx-nope"), NO_HOST),
    }),
    "explain pod": Command(("explain", "pod", "default/web-1"), READERS, {
        "missing object": (("explain", "pod", "default/nope"), NO_POD),
        "bad value": (("explain", "pod", "default/"),
                      Failure("not 'default/'", "expected NAMESPACE/NAME")),
    }),
    "explain node": Command(("explain", "node", "node-1"), READERS, {
        "missing object": (("explain", "node", "nope"), NO_NODE),
    }),
    "status": Command(("status",), READERS),
    "events": Command(("events",), (*BUS, *USAGE), {
        "bad value": (("events", "--since", "soon"),
                      Failure("--since 'soon'", "give a duration (90s, 15m, 2h, 7d, 1w)")),
    }),
    "demo": Command(("demo",), (*READERS, *VCENTER), {
        "bad value": (("demo", "--vcenter", "vcsim:8989"), BAD_VCENTER_URL),
    }),
    "seed-vcsim": Command(("seed-vcsim",), (*KUBE, *VCENTER, *USAGE), {
        "bad value": (("seed-vcsim", "--vcenter", "vcsim:8989"), BAD_VCENTER_URL),
    }),
    "check-cluster": Command(("check-cluster",), (*KUBE, *USAGE), kube_fix=GET_A_CLUSTER),
    "uninstall": Command(("uninstall", "--dry-run"), (*KUBE, "no NATS", *VCENTER, *USAGE), {
        "bad value": (("uninstall", "--dry-run", "--vcenter", "https://vcenter.example.com"),
                      Failure("--vcenter wants https://user@host", "VCENTER__PASSWORD")),
    }),
    "bus provision": Command(("bus", "provision"), ("no NATS", *USAGE), {
        "bad value": (("bus", "provision", "--config", "absent.yaml"),
                      Failure("cannot read config file absent.yaml", "check --config")),
    }, nats_fix="or set nats.servers in --config FILE"),
    "bus credentials": Command(("bus", "credentials", "--dir", "creds"), USAGE, {
        "bad value": (("bus", "credentials", "--dir", "a-file/creds"),
                      Failure("cannot write the bus credentials into a-file/creds", "--dir")),
    }),
    "bus secrets": Command(("bus", "secrets"), (*KUBE, *USAGE)),
    "bus auth-config": Command(("bus", "auth-config"), USAGE),
    "bus subscriber add": Command(
        ("bus", "subscriber", "add", "audit", "--events", "pod.evicted"),
        (*OUTSIDE, *BUS, *KUBE, *USAGE),
        {"bad value": (("bus", "subscriber", "add", "Audit_1", "--events", "pod.evicted"),
                       Failure("subscriber name 'Audit_1'", "use lower-case letters"))},
        kube_argv=SUBSCRIBER_KUBE,
    ),
    "bus subscriber remove": Command(
        ("bus", "subscriber", "remove", "audit"), (*OUTSIDE, "no NATS", *KUBE, *USAGE),
        {"missing object": (("bus", "subscriber", "remove", "nobody"),
                            Failure("no subscriber 'nobody' is registered",
                                    "hostaffinity bus subscriber list"))},
        kube_argv=SUBSCRIBER_KUBE,
    ),
    "bus subscriber list": Command(
        ("bus", "subscriber", "list"), (*OUTSIDE, *KUBE, *USAGE), kube_argv=SUBSCRIBER_KUBE[:2]
    ),
    "fleet hub-credentials": Command(("fleet", "hub-credentials", "--dir", "new-hub"), USAGE, {
        "bad value": (("fleet", "hub-credentials", "--dir", "a-file/hub"),
                      Failure("cannot write the hub's credentials into a-file/hub",
                              "pass --dir a folder this user may write")),
    }),
    "fleet join": Command((*JOIN, "--dir", HUB), USAGE, {
        "missing object": ((*JOIN, "--dir", "no-hub"), NO_HUB_FOLDER),
        "bad value": (("fleet", "join", "East_1", *JOIN[3:], "--dir", HUB),
                      Failure("install name 'East_1'", "use lowercase letters")),
    }),
    "fleet leave": Command(("fleet", "leave", "east", "--dir", HUB), USAGE, {
        "missing object": (("fleet", "leave", "east", "--dir", "no-hub"), NO_HUB_FOLDER),
        "bad value": (("fleet", "leave", "nobody", "--dir", HUB),
                      Failure("no install 'nobody' in the fleet", "none has joined")),
    }),
    "fleet provision": Command(("fleet", "provision", "--dir", HUB), ("no NATS", *USAGE), {
        "missing object": (("fleet", "provision", "--dir", "no-hub"), NO_HUB_FOLDER),
    }),
    "fleet topology": Command(("fleet", "topology"), FLEET_READERS, {
        "missing object": (("fleet", "topology"), NO_FLEET_VIEW),
    }),
    "fleet exposure": Command(("fleet", "exposure"), FLEET_READERS, {
        "missing object": (("fleet", "exposure"), NO_FLEET_VIEW),
    }),
    "fleet what-if maintenance": Command(
        ("fleet", "what-if", "maintenance", "esx-a"), FLEET_READERS,
        {"missing object": (("fleet", "what-if", "maintenance", "esx-a"), NO_FLEET_VIEW)},
    ),
    "fleet what-if host-failure": Command(
        ("fleet", "what-if", "host-failure", "esx-a"), FLEET_READERS,
        {"missing object": (("fleet", "what-if", "host-failure", "esx-a"), NO_FLEET_VIEW)},
    ),
}  # fmt: skip
MATRIX = [
    (name, failure)
    for name, command in COMMANDS.items()
    for failure in (*command.failures, *command.variants)
]


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def relative_path_defaults(parser: argparse.ArgumentParser) -> list[str]:
    """Options whose default is a path relative to the working directory (`--dir`)."""
    return [
        action.dest
        for action in parser._actions
        if isinstance(action.default, str)
        and "/" in action.default
        and "://" not in action.default
        and not action.default.startswith("/")
    ]


def test_every_command_has_a_row() -> None:
    assert set(PARSERS) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_run_without_each_thing_it_takes(name: str) -> None:
    parser, failures = PARSERS[name], set(COMMANDS[name].failures)
    for option, needs in NEEDS.items():
        if option in option_strings(parser):
            assert set(needs) <= failures, option
    if relative_path_defaults(parser):
        assert set(OUTSIDE) <= failures
    assert set(USAGE) <= failures


@dataclass
class Where:
    """What a row's command is pointed at: each healthy unless the row's failure says not."""

    kubeconfig: Path | None
    nats: str
    vcenter: str
    local_bus: Path


def command_line_of(
    name: str, argv: tuple[str, ...], failure: str, where: Where, tmp_path: Path
) -> list[str]:
    """`argv` with the options that point the command at `where`, as far as it takes them."""
    command, options = COMMANDS[name], option_strings(PARSERS[name])
    line = list(argv)
    if failure in KUBE:
        line += [part.format(local_bus=where.local_bus) for part in command.kube_argv]
    if "--kubeconfig" in options and where.kubeconfig is not None:
        line += ["--kubeconfig", str(where.kubeconfig)]
    if "--nats" in options:
        line += ["--nats", where.nats]
    if "--vcenter" in options and "--vcenter" not in line:
        line += ["--vcenter", where.vcenter]
    elsewhere = {"--dir", "--namespace"} & set(line)
    if "--dir" in options and failure != "outside the repository" and not elsewhere:
        line += ["--dir", str(where.local_bus)]
    if name == "bus provision" and "--config" not in line:
        config = tmp_path / "shared.yaml"
        config.write_text(f'nats:\n  servers: ["{where.nats}"]\n', encoding="utf-8")
        line += ["--config", str(config)]
    return line


def local_bus(directory: Path) -> Path:
    """What `bus credentials --dir` writes (as `make dev` runs it), with a subscriber `audit`,
    and the pid file of a nats-server that is not running (as a `make dev` that ended hard
    leaves it): a command that signalled it before it reached NATS would fail on it."""
    seeds = write_local_credentials(directory)
    seed = seeds["provision"].read_bytes().strip()
    LocalSubscribers(directory).save([Subscriber("audit", ("pod.evicted",), public_key(seed))])
    (directory / "nats.pid").write_text(f"{NO_SUCH_PID}\n", encoding="utf-8")
    return directory


async def record_a_drs_rule(nats: NatsServer) -> None:
    """An ownership record of vCenter `vcenter`: uninstall has a rule to remove there."""
    record = DrsOwnership(
        vcenter="vcenter",
        cluster_moid="domain-c7",
        name="hostaffinity-anti-0123456789ab",
        kind="vm-anti-affinity",
        state="applied",
        applied_at=datetime.now(UTC).isoformat(),
    )
    async with nats.connection("drs-translator") as bus:
        kv = await bus.js.key_value(DRS_BUCKET)
        await kv.put(drs_rule_key("vcenter", "domain-c7", record.name), msgspec.json.encode(record))


@contextmanager
def vcenter_for(failure: str, takes_vcenter: bool, vcsim: VcsimFactory) -> Iterator[str]:
    """The --vcenter URL of the row: the failure's, else a running vcsim (when the command
    takes a vCenter and gets past parsing its arguments)."""
    with silent_listener() as silent_port:
        if failure == "vCenter refuses connections":
            yield VCENTER_URL.format(port=closed_port())
        elif failure == "vCenter silent":
            yield VCENTER_URL.format(port=silent_port)
        elif failure == "vCenter refuses the login":
            yield vcsim().url.replace("user:pass@", "user:wrong@")
        elif takes_vcenter and failure not in USAGE and failure != "bad value":
            yield vcsim().url
        else:
            yield VCENTER_URL.format(port=closed_port())


@pytest.fixture
def healthy(kube_double: KubeDouble, kubeconfig: Path) -> Path:
    """The objects the commands ask about, so only the case's failure is missing."""
    kube_double.seed(node_object("node-1"))
    kube_double.seed(pod_object("web-1", "web", "node-1", owner="web-rs", affinity=None))
    return kubeconfig


@pytest.mark.parametrize(("name", "failure"), MATRIX, ids=[f"{n}: {f}" for n, f in MATRIX])
async def test_a_command_says_in_one_line_what_is_missing(
    name: str,
    failure: str,
    healthy: Path,
    kube_double: KubeDouble,
    nats_server: NatsServer,
    vcsim: VcsimFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = COMMANDS[name]
    workdir = tmp_path / "elsewhere"  # not a checkout: nothing of the repository's is here
    workdir.mkdir()
    (workdir / "a-file").write_text("", encoding="utf-8")
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("HOSTAFFINITY_VCENTER__PASSWORD", raising=False)
    argv, expected = command.argv, {**KUBE, **BUS, **VCENTER, **OUTSIDE, **USAGE}.get(failure)
    if failure in command.variants:
        argv, expected = command.variants[failure]
    where = Where(healthy, nats_server.url, "", local_bus(tmp_path / "bus"))
    takes_vcenter = "--vcenter" in option_strings(PARSERS[name])
    with silent_listener() as silent_port, vcenter_for(failure, takes_vcenter, vcsim) as vcenter:
        where.vcenter = vcenter
        if failure == "no kubeconfig":
            where.kubeconfig = None
        elif failure == "empty kubeconfig":
            where.kubeconfig = empty_kubeconfig(tmp_path)
        elif failure == "broken kubeconfig":
            where.kubeconfig = broken_kubeconfig(tmp_path)
        elif failure == "API refuses":
            where.kubeconfig = kubeconfig_for(tmp_path, f"http://127.0.0.1:{closed_port()}")
        elif failure == "API silent":
            where.kubeconfig = kubeconfig_for(tmp_path, f"http://127.0.0.1:{silent_port}")
        elif failure == "API forbids":
            where.kubeconfig = anonymous_kubeconfig(kube_double, tmp_path)
        elif failure == "no NATS":
            where.nats = f"nats://127.0.0.1:{closed_port()}"
        elif failure == "unprovisioned bus":
            await nats_server.restart(keep_store=False)  # every stream and bucket gone
        elif failure in VCENTER and name == "uninstall":
            await record_a_drs_rule(nats_server)
        if name.startswith("fleet "):
            HubFolder(workdir / HUB).ensure_credentials()
        if failure == "unknown option":
            argv = (*argv, "--no-such-option")
        line = command_line_of(name, argv, failure, where, tmp_path)
        capsys.readouterr()
        started = time.monotonic()
        code = await asyncio.to_thread(exit_code, line)
        elapsed = time.monotonic() - started
        gc.collect()  # an unclosed session or a destroyed task says so when collected
        err = capsys.readouterr().err

    assert expected is not None
    lines = [text for text in err.splitlines() if text.strip() and not PROGRESS.match(text)]
    assert code == expected.code, err
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    assert lines[0].startswith(f"hostaffinity {name}: "), err
    port = vcenter.rpartition(":")[2].partition("/")[0]
    said = expected.cause.format(home=tmp_path, cwd=workdir, port=port, name=name)
    assert said in lines[0], err
    fix = expected.fix
    if failure in KUBE and command.kube_fix:
        fix = command.kube_fix
    elif failure == "no NATS" and command.nats_fix:
        fix = command.nats_fix
    assert fix.format(name=name) in lines[0], err
    assert elapsed < WITHIN_SECONDS, f"{elapsed:.1f} s: {err}"
