"""Every `hostaffinity` command in docs/ that names the bus (`--nats…` options) works as written.

Commands are read from the pages themselves (fenced blocks, `$ ` prompts and `\\` continuations
included, and inline code spans; usage brackets `[--all]` are taken as given), then run as the
installed `hostaffinity` against the bus they address: `tls://127.0.0.1:4222` (or `localhost`)
is the shipped three-server TLS cluster through `kubectl port-forward` (its certificate from
`hostaffinity bus secrets`), `nats://127.0.0.1:4222` the one server of `make dev` (local.conf).
Only the port is changed, to the one the test's server listens on; the files a command names
(`cli.nk`, `nats-ca.crt`, `.cache/dev/nats/cli.nk`) are where the docs' steps put them. A command
elided with `...` cannot be run as written and is not collected.

Each must exit 0, or, for one that follows the stream (`events`), print what the bus holds and
keep following until interrupted; what it prints must show the bus's content.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.errors import Error as NatsError

from hostaffinity.cli.main import command_line, follows_the_stream
from hostaffinity.runtime.bus.client import Bus
from tests.platform.bus_values import node_placed, node_placement
from tests.platform.console import SCRIPTS, children_get_ctrl_c
from tests.platform.fleet_hub import running_hub
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import LocalBus, NatsCluster

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
DOCUMENTED_PORT = "4222"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`]+)`")
URL = re.compile(r"\b(tls|nats)://(127\.0\.0\.1|localhost):" + DOCUMENTED_PORT + r"\b")
SEED_SECONDS = 30.0
# Generous: a command's start alone (imports) took 18 s on a loaded two-core machine.
ENDING_SECONDS = 90.0
FOLLOWING_SECONDS = 60.0
INTERRUPTED_SECONDS = 15.0
EXIT_INTERRUPTED = 130
NODE = "worker-1.k8s.example.com"


@dataclass(frozen=True)
class DocumentedCommand:
    page: str
    text: str

    def argv(self, port: int) -> list[str]:
        """The command as a shell would split it, the documented port replaced by `port`."""
        unbracketed = re.sub(r"\[([^\]]*)\]", r"\1", self.text)
        # The host as written (the bus certificate must name it), the port the test's.
        at_port = URL.sub(lambda url: f"{url.group(1)}://{url.group(2)}:{port}", unbracketed)
        words = shlex.split(at_port)
        return [str(SCRIPTS / words[0]), *words[1:]]

    @property
    def over_tls(self) -> bool:
        found = URL.search(self.text)
        assert found, f"{self.page}: `{self.text}` names no bus at 127.0.0.1:{DOCUMENTED_PORT}"
        return found.group(1) == "tls"


def _is_bus_command(text: str) -> bool:
    """A runnable command that names the bus: not a usage line (`--nats URL`), not elided
    (`...`), and not one that also needs a vCenter (demo, uninstall: their own tests run them
    against vcsim)."""
    return (
        text.startswith("hostaffinity ")
        and re.search(r"--nats[= ]\S*://", text) is not None
        and "..." not in text
        and "--vcenter" not in text
    )


def documented_bus_commands() -> list[DocumentedCommand]:
    found: list[DocumentedCommand] = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        name = str(page.relative_to(REPO))
        text = page.read_text(encoding="utf-8")
        for block in FENCE.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                command = " ".join(line.strip().removeprefix("$ ").split())
                if _is_bus_command(command):
                    found.append(DocumentedCommand(name, command))
        for span in INLINE.findall(FENCE.sub("", text)):
            command = " ".join(span.split())
            if _is_bus_command(command):
                found.append(DocumentedCommand(name, command))
    return found


COMMANDS = documented_bus_commands()


def test_the_docs_have_bus_commands_to_check() -> None:
    """The collector still finds what it is for: install's and the bus page's commands."""
    pages = {command.page for command in COMMANDS}
    assert {"docs/install.md", "docs/bus.md"} <= pages, COMMANDS
    assert any(command.over_tls for command in COMMANDS)


async def seed(bus: Bus) -> None:
    """What the node-labeller would have written: one placement, its event; retried as the
    labeller retries, while a just-provisioned R3 stream still elects its leader (both writes
    are idempotent: a KV value, an event with its Nats-Msg-Id)."""
    async with asyncio.timeout(SEED_SECONDS):
        while True:
            try:
                await (await bus.topology()).put_node(node_placement(NODE))
                await bus.publish_event(node_placed(NODE))
                return
            except NatsError:
                await asyncio.sleep(0.5)


# What each command's output must show of the seeded bus.
SHOWS = {
    "topology": NODE,
    "events": node_placed(NODE).id,
    "fleet": "fleet view KV_hostaffinity-fleet",
}


def follows(argv: list[str]) -> bool:
    """Whether the command follows the stream, as the CLI decides it (`events` unless given
    --since without --follow); every other command ends by itself."""
    return follows_the_stream(command_line().parse_args(argv[1:]))


async def ended(
    process: asyncio.subprocess.Process, seconds: float, failure: str
) -> tuple[bytes, bytes]:
    """Its stdout and stderr once it ended; killed, and `failure` raised, if not within
    `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            return await process.communicate()
    except TimeoutError:
        process.kill()
        out, errors = await process.communicate()
        raise AssertionError(f"{failure}:\n{out.decode()}\n{errors.decode()}") from None


async def run_as_written(
    argv: list[str], cwd: Path, env: dict[str, str], expected: str
) -> tuple[int, str, str]:
    """Exit status, stdout and stderr. A command that ends by itself gets ENDING_SECONDS; one
    that follows the stream must show `expected` within FOLLOWING_SECONDS while it keeps
    running, and is then interrupted as a person would (Ctrl-C): it counts as working when it
    then exits 130. One that does neither in time is killed, and fails."""
    with children_get_ctrl_c():
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    if not follows(argv):
        out, errors = await ended(
            process,
            ENDING_SECONDS,
            f"`{shlex.join(argv)}` ends by itself, but had not after {ENDING_SECONDS:g} s",
        )
        assert process.returncode is not None
        return process.returncode, out.decode(), errors.decode()
    assert process.stdout is not None
    printed, stopped = b"", False
    try:
        async with asyncio.timeout(FOLLOWING_SECONDS):
            while expected.encode() not in printed:
                chunk = await process.stdout.read(4096)
                stopped = not chunk
                if stopped:
                    break
                printed += chunk
    except TimeoutError:
        pass
    following = not stopped and expected.encode() in printed
    if following:
        process.send_signal(signal.SIGINT)
    elif process.returncode is None:
        process.kill()
    rest, errors = await ended(
        process, INTERRUPTED_SECONDS, f"`{shlex.join(argv)}` went on after Ctrl-C"
    )
    if not following:
        why = "ended by itself" if stopped else f"showed no {expected!r} in {FOLLOWING_SECONDS:g} s"
        raise AssertionError(
            f"`{shlex.join(argv)}` follows the stream, but {why}:\n"
            f"{(printed + rest).decode()}\n{errors.decode()}"
        )
    code = 0 if process.returncode == EXIT_INTERRUPTED else process.returncode
    assert code is not None
    return code, (printed + rest).decode(), errors.decode()


@pytest.fixture
async def local_bus(tmp_path: Path) -> AsyncIterator[LocalBus]:
    bus = LocalBus(tmp_path / "dev", tmp_path / "site" / ".cache" / "dev" / "nats")
    await bus.start()
    try:
        yield bus
    finally:
        await bus.stop()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.page}:{c.text.split()[1]}")
async def test_documented_bus_command_works_as_written(
    command: DocumentedCommand,
    nats_cluster: NatsCluster,
    local_bus: LocalBus,
    kube_double: KubeDouble,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    # docs/install.md: the cli seed and the bus CA, out of the Secrets `hostaffinity bus
    # secrets` made, in the working folder.
    shutil.copy(nats_cluster.seeds["cli"], site / "cli.nk")
    shutil.copy(nats_cluster.tls_dir / "ca.crt", site / "nats-ca.crt")
    kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    if command.over_tls:
        port = nats_cluster.ports[0].client
        async with nats_cluster.connection("node-labeller") as bus:
            await seed(bus)
    else:
        port = local_bus.ports.client
        async with local_bus.connection("node-labeller") as bus:
            await seed(bus)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    shows = SHOWS[command.text.split()[1]]
    if command.text.split()[1] == "fleet":
        # docs/fleet.md: on the hub, through a port-forward to it, with the hub's folder.
        async with running_hub(tmp_path / "hub", folder=site / "fleet-hub") as hub:
            argv = command.argv(hub.ports[0].client)
            code, out, err = await run_as_written(argv, site, env, shows)
    else:
        code, out, err = await run_as_written(command.argv(port), site, env, shows)
    assert code == 0, f"{command.page}: `{command.text}` exited {code}:\n{err}"
    assert "Traceback" not in err, err
    assert shows in out, out
