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

from hostaffinity.runtime.bus.client import Bus
from tests.platform.bus_values import node_placed, node_placement
from tests.platform.console import SCRIPTS
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import LocalBus, NatsCluster

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
DOCUMENTED_PORT = "4222"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`]+)`")
URL = re.compile(r"\b(tls|nats)://(127\.0\.0\.1|localhost):" + DOCUMENTED_PORT + r"\b")
RUN_SECONDS = 60.0
SEED_SECONDS = 30.0
# A command that printed and then says nothing for this long while still running is following.
FOLLOWING_QUIET = 5.0
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
SHOWS = {"topology": NODE, "events": node_placed(NODE).id}


async def run_as_written(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr. A command that printed and then stays quiet while it keeps
    running follows the bus: it is interrupted as a person would (Ctrl-C), and counts as working
    when it then exits 130."""
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    printed = b""
    try:
        async with asyncio.timeout(RUN_SECONDS):
            while True:
                try:
                    chunk = await asyncio.wait_for(process.stdout.read(4096), FOLLOWING_QUIET)
                except TimeoutError:
                    if printed:
                        break  # printed what the bus holds, now waits for more: a follower
                    continue
                if not chunk:
                    break  # it ended
                printed += chunk
    except TimeoutError:
        pass
    if process.returncode is None:
        # Ctrl-C for a follower; one silent for RUN_SECONDS is hung: ended, and failed.
        process.send_signal(signal.SIGINT if printed else signal.SIGKILL)
    rest, errors = await process.communicate()
    code = 0 if process.returncode == EXIT_INTERRUPTED and printed else process.returncode
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
    code, out, err = await run_as_written(command.argv(port), site, env)
    assert code == 0, f"{command.page}: `{command.text}` exited {code}:\n{err}"
    assert "Traceback" not in err, err
    assert SHOWS[command.text.split()[1]] in out, out
