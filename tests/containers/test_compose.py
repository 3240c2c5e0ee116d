"""compose.yaml run for real with podman-compose, with tests/containers/compose/override.yaml
replacing only what CI cannot pull (the NATS, vcsim and k3s images; the override says how each
differs): every service container becomes healthy (compose's own healthchecks), answers on its
published port, the node-labeller's labels appear on the nodes, and `down -v` leaves nothing.
A copy of compose.yaml with a broken environment name or port makes the same check fail.

Why the test starts the services itself, in compose's dependency order: podman 4.3 (Debian 12)
runs no healthchecks on its own (it schedules them with systemd timers), podman-compose 1.5
ignores `service_healthy` on podman before 4.6, and podman 4.3's `--requires` (which
podman-compose uses for depends_on) fails on one-shots that have exited. So the test reads the
merged config (`podman-compose config`) and, service by service in depends_on order, waits for
each dependency's condition (started; healthy, by running its healthcheck with
`podman healthcheck run`; completed successfully) before `podman-compose up -d --no-deps`
starts the service, as Docker Compose does.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from hostaffinity.schema import LABEL_ESXI_HOST
from tests.containers.podman import REPO, environment, podman

pytestmark = pytest.mark.timeout(600)

OVERRIDE = REPO / "tests" / "containers" / "compose" / "override.yaml"
PODMAN_COMPOSE = Path(sys.executable).parent / "podman-compose"
API_TOKEN = "hostaffinity-admin-token"  # the Kubernetes double's admin token (KubeDouble)
UP_WITHIN_SECONDS = 150.0
PUBLISHED_WITHIN_SECONDS = 15.0


class ComposeProject:
    """A compose project in its own folder: compose.yaml (maybe mutated), the override, and
    links to the folders compose.yaml and the override mount (k8s/, tests/)."""

    def __init__(self, folder: Path, compose_text: str) -> None:
        self.folder = folder
        self.name = f"hatest{os.getpid()}{folder.name[-6:]}".lower().replace("_", "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "compose.yaml").write_text(compose_text, encoding="utf-8")
        shutil.copy(OVERRIDE, folder / "override.yaml")
        for linked in ("k8s", "tests"):
            (folder / linked).symlink_to(REPO / linked)
        self.log = folder / "compose.log"

    async def compose(self, *args: str) -> str:
        command = [str(PODMAN_COMPOSE), "-p", self.name, "-f", "compose.yaml"]
        command += ["-f", "override.yaml", *args]
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=self.folder,
            env=environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 180)
        text = out.decode(errors="replace")
        with self.log.open("a") as log:
            log.write(f"$ podman-compose {' '.join(args)}\n{text}\n")
        assert process.returncode == 0, f"podman-compose {' '.join(args)}:\n{text}"
        return text

    def container(self, service: str) -> str:
        return f"{self.name}_{service}_1"

    async def state(self, service: str) -> dict[str, Any]:
        _, out = await podman("container", "inspect", self.container(service))
        state: dict[str, Any] = json.loads(out)[0]["State"]
        return state

    async def logs(self, service: str) -> str:
        _, out = await podman("logs", self.container(service), check=False)
        return out[-3000:]

    async def healthy(self, service: str) -> bool:
        code, _ = await podman("healthcheck", "run", self.container(service), check=False)
        return code == 0

    async def leftovers(self) -> list[str]:
        label = f"label=io.podman.compose.project={self.name}"
        found = []
        for kind in ("container", "volume", "network", "pod"):
            args = [kind, "ls", "-q", "--filter", label]
            if kind == "container":
                args.insert(2, "--all")
            _, out = await podman(*args, check=False)
            found += [f"{kind} {line}" for line in out.split()]
        return found


async def condition_met(project: ComposeProject, service: str, condition: str) -> bool:
    """Whether a dependency's depends_on condition holds; an exit that can no longer meet it
    fails the test at once, with the container's log."""
    state = await project.state(service)
    running, code = state["Running"], state["ExitCode"]
    if condition == "service_completed_successfully":
        if not running and state["Status"] == "exited":
            assert code == 0, f"{service} exited {code}:\n{await project.logs(service)}"
            return True
        return False
    assert running or state["Status"] == "created", (
        f"{service} is {state['Status']} (exit {code}):\n{await project.logs(service)}"
    )
    if condition == "service_healthy":
        return running and await project.healthy(service)
    return bool(running)


async def until(what: str, check: Callable[[], Any], within: float) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"no {what} within {within:.0f} s"
        await asyncio.sleep(0.5)


def dependency_order(services: dict[str, Any]) -> list[str]:
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {path}"
        if name in order:
            return
        for dependency in services[name].get("depends_on", {}):
            visit(dependency, (*path, name))
        order.append(name)

    for name in services:
        visit(name, ())
    return order


async def up_and_check(project: ComposeProject) -> None:
    """The whole check: up in dependency order, healthy, published, labelled."""
    merged = yaml.safe_load(await project.compose("config"))
    services: dict[str, Any] = merged["services"]
    started = time.monotonic()
    for name in dependency_order(services):
        for dependency, spec in services[name].get("depends_on", {}).items():
            condition = spec.get("condition", "service_started")
            await until(
                f"{dependency} {condition} (for {name})",
                lambda d=dependency, c=condition: condition_met(project, d, c),  # type: ignore[misc]
                UP_WITHIN_SECONDS,
            )
        await project.compose("up", "-d", "--no-deps", name)
    # Every service with a healthcheck healthy; the one-shots done.
    for name, spec in services.items():
        condition = "service_healthy" if "healthcheck" in spec else "service_started"
        if spec.get("restart") == "no":
            condition = "service_completed_successfully"
        await until(
            f"{name} {condition}",
            lambda n=name, c=condition: condition_met(project, n, c),  # type: ignore[misc]
            UP_WITHIN_SECONDS,
        )
    print(f"compose: every service up and healthy in {time.monotonic() - started:.0f} s")
    # Every published port answers on the host: a service's health port (8080) its /readyz,
    # the others a TCP connection.
    async with aiohttp.ClientSession() as http:
        for name, spec in services.items():
            for port in spec.get("ports", []):
                published, _, target = str(port).rpartition(":")

                async def answers(p: str = published, t: str = target) -> bool:
                    try:
                        if t == "8080":
                            async with http.get(f"http://127.0.0.1:{p}/readyz") as response:
                                return response.status == 200
                        _, writer = await asyncio.open_connection("127.0.0.1", int(p))
                        writer.close()
                        await writer.wait_closed()
                        return True
                    except (aiohttp.ClientError, OSError):
                        return False

                await until(
                    f"{name} answering on published port {port}", answers, PUBLISHED_WITHIN_SECONDS
                )
        # The node-labeller's labels, read from the API double where compose publishes k3s.
        api_port = next(
            str(p).rpartition(":")[0] for p in services["k3s"]["ports"] if str(p).endswith(":6443")
        )

        async def labelled() -> bool:
            headers = {"Authorization": f"Bearer {API_TOKEN}"}
            url = f"http://127.0.0.1:{api_port}/api/v1/nodes"
            async with http.get(url, headers=headers) as response:
                nodes = (await response.json())["items"]
            return bool(nodes) and all(
                LABEL_ESXI_HOST in (n["metadata"].get("labels") or {}) for n in nodes
            )

        await until("labels on every node", labelled, 60)


async def run_project(project: ComposeProject) -> None:
    """up_and_check, then `down -v` whatever happened; nothing of the project may be left."""
    try:
        await up_and_check(project)
    finally:
        await project.compose("down", "-v", "-t", "2")
        assert await project.leftovers() == []


def compose_text() -> str:
    return (REPO / "compose.yaml").read_text(encoding="utf-8")


async def test_compose_runs_every_service_healthy_and_down_leaves_nothing(
    tmp_path: Path,
) -> None:
    await run_project(ComposeProject(tmp_path / "compose", compose_text()))


@pytest.mark.parametrize(
    ("broken", "original", "mutated"),
    [
        (
            "env name",
            "      HOSTAFFINITY_VCENTERS__0__HOST: vcsim\n",
            "      HOSTAFFINITY_VCENTERS__0__HOSTNAME: vcsim\n",
        ),
        ("port", 'ports: ["8081:8080"]', 'ports: ["8081:8090"]'),
    ],
)
async def test_a_broken_compose_file_fails_the_check(
    tmp_path: Path, broken: str, original: str, mutated: str
) -> None:
    text = compose_text()
    assert original in text, f"compose.yaml changed: update the {broken} mutation"
    project = ComposeProject(tmp_path / "compose", text.replace(original, mutated, 1))
    with pytest.raises(AssertionError) as failure:
        await run_project(project)
    print(f"{broken}: {str(failure.value).splitlines()[0]}")
