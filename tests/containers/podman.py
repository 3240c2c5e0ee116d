"""Podman from the tests: the images `scripts/images.sh` built, containers started, stopped and
read, all through the podman CLI (asynchronously, so the test's own servers keep serving).

Images are not built here: `make test` runs scripts/images.sh before pytest. A machine without
podman or without the images fails these tests, naming what to run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = REPO / "tools" / "podman" / "containers.conf"
SERVICE_REPOSITORY = "localhost/hostaffinity"
TEST_REPOSITORY = "localhost/hostaffinity-test"
USER = "65532"
COMMAND_TIMEOUT_SECONDS = 120.0


def services() -> list[str]:
    """Every service folder: each has an image, whatever services/ holds today."""
    return sorted(p.parent.name for p in (REPO / "services").glob("*/pyproject.toml"))


def service_image(service: str) -> str:
    return f"{SERVICE_REPOSITORY}/{service}:latest"


def service_version(service: str) -> str:
    text = (REPO / "services" / service / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version = "([^"]+)"$', text, re.MULTILINE)
    assert match, service
    return match.group(1)


def environment() -> dict[str, str]:
    """This environment with podman set up as scripts/images.sh has it (runc, cgroupfs)."""
    return os.environ | {
        "CONTAINERS_CONF": str(CONTAINERS_CONF),
        "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin",
    }


def podman_binary() -> str:
    found = shutil.which("podman", path=environment()["PATH"])
    assert found, "podman is not installed: run `make images` (scripts/images.sh) first"
    return found


async def podman(
    *args: str, check: bool = True, limit: float = COMMAND_TIMEOUT_SECONDS
) -> tuple[int, str]:
    """`podman ARGS`: its exit code and output (stdout and stderr together)."""
    process = await asyncio.create_subprocess_exec(
        podman_binary(),
        *args,
        env=environment(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), limit)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"podman {' '.join(args)} took over {limit:.0f} s") from None
    text = out.decode(errors="replace")
    assert process.returncode is not None
    if check and process.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {process.returncode}:\n{text}")
    return process.returncode, text


async def inspect_image(image: str) -> dict[str, object]:
    code, out = await podman("image", "inspect", image, check=False)
    assert code == 0, f"no image {image}: run `make images` (scripts/images.sh)\n{out}"
    inspected: list[dict[str, object]] = json.loads(out)
    return inspected[0]


@dataclass
class Container:
    """A detached container, by name; `remove` takes it away whatever state it is in."""

    name: str
    image: str

    async def running(self) -> bool:
        code, out = await podman(
            "container", "inspect", "--format", "{{.State.Running}}", self.name, check=False
        )
        return code == 0 and out.strip() == "true"

    async def logs(self) -> str:
        _, out = await podman("logs", self.name, check=False)
        return out

    async def exit_code(self) -> int:
        _, out = await podman("container", "inspect", "--format", "{{.State.ExitCode}}", self.name)
        return int(out.strip())

    async def terminate(self, within: float) -> tuple[int, float]:
        """SIGTERM, then wait (at most `within` s) for the exit: its code and how long it took."""
        started = time.monotonic()
        await podman("kill", "--signal", "TERM", self.name)
        deadline = started + within
        while await self.running():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} still runs {within:.0f} s after SIGTERM:\n{await self.logs()}"
                )
            await asyncio.sleep(0.1)
        return await self.exit_code(), time.monotonic() - started

    async def remove(self) -> None:
        await podman("rm", "--force", "--time", "0", self.name, check=False)


async def run_detached(
    name: str,
    image: str,
    *,
    env: Mapping[str, str],
    mounts: Mapping[Path, str] = {},
    args: Sequence[str] = (),
) -> Container:
    """The image as the product runs it: read-only root file system, uid 65532, and here on the
    host network (the test's nats-server, vcsim and Kubernetes double listen on loopback)."""
    options = ["--read-only", "--user", USER, "--network", "host"]
    for key, value in env.items():
        options += ["--env", f"{key}={value}"]
    for source, target in mounts.items():
        options += ["--volume", f"{source}:{target}:ro"]
    await podman("rm", "--force", "--time", "0", name, check=False)
    await podman("run", "--detach", "--name", name, *options, image, *args)
    return Container(name, image)


async def run_once(
    image: str, *args: str, env: Mapping[str, str] = {}, mounts: Mapping[Path, str] = {}
) -> tuple[int, str]:
    """The image's entrypoint with `args`, read-only as uid 65532 and with no network."""
    options = ["--rm", "--read-only", "--user", USER, "--network", "none"]
    for key, value in env.items():
        options += ["--env", f"{key}={value}"]
    for source, target in mounts.items():
        options += ["--volume", f"{source}:{target}:ro"]
    return await podman("run", *options, image, *args, check=False)
