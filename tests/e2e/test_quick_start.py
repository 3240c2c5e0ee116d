"""The README's quick start, line by line, on a fresh clone of this repository's HEAD: the lines
are read from README.md (a changed quick start changes what runs here), the Kubernetes double
stands in for the user's cluster, and the demo must end with its passing summary.

A fresh clone is the point: no .venv, no build/vcsim, no folder of ours beside it; `make dev` has to
install and build what it needs by itself (only uv's and Go's caches are shared, as on a machine
that built something before).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.dev_world import REPO, DevRun, dev_environment, kind_cluster
from tests.platform.kube_double import KubeDouble

pytestmark = pytest.mark.timeout(600)

PLACEHOLDER = "<this repository>"
PASSED = re.compile(r"demo: (\d+) steps passed, 0 failed\b")


@dataclass(frozen=True)
class Step:
    """One command of the quick start; `keeps_running` when the next line goes to a second
    terminal (this one does not return)."""

    command: str
    keeps_running: bool


def quick_start_steps(readme: Path = REPO / "README.md") -> list[Step]:
    """The commands of the first code block under "## Quick start", in order, comments off."""
    section = readme.read_text(encoding="utf-8").split("\n## Quick start\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    block = section.split("```", 2)[1].split("\n", 1)[1]  # past the fence's language line
    lines = [re.split(r"\s+#\s*", line.strip(), maxsplit=1) for line in block.splitlines()]
    lines = [parts for parts in lines if parts[0]]
    steps = []
    for index, (command, *_) in enumerate(lines):
        following = lines[index + 1][1:] if index + 1 < len(lines) else []
        second_terminal = any("second terminal" in comment for comment in following)
        parts = [part.strip() for part in command.split("&&")]
        steps += [Step(part, second_terminal and part == parts[-1]) for part in parts]
    return steps


def _caller_cache(variable: str, ask: list[str]) -> dict[str, str]:
    """{variable: the cache directory the caller uses}, so the clone's setup shares it even
    though HOME is the test's; empty when the tool is missing (setup installs it, cold)."""
    if variable in os.environ:
        return {variable: os.environ[variable]}
    try:
        answer = subprocess.run(ask, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {variable: answer} if answer else {}


def user_environment(kube: KubeDouble, tmp_path: Path) -> dict[str, str]:
    """What the user's terminals have: a kubeconfig for six kind nodes and free ports; nothing
    of this checkout (its virtualenv, DEV_STATE), so the clone keeps state where it defaults to,
    and not the `make test` this may run under (a nested make prints its directories)."""
    environment = dev_environment(tmp_path, kind_cluster(kube, tmp_path))
    for variable in ("DEV_STATE", "VIRTUAL_ENV", "MAKELEVEL", "MAKEFLAGS", "MFLAGS"):
        environment.pop(variable, None)
    own_bin = str(REPO / ".venv" / "bin")
    path = environment.get("PATH", "").split(os.pathsep)
    environment["PATH"] = os.pathsep.join(entry for entry in path if entry != own_bin)
    environment |= _caller_cache("UV_CACHE_DIR", ["uv", "cache", "dir"])
    environment |= _caller_cache("GOCACHE", ["go", "env", "GOCACHE"])
    return environment


async def run_step(command: str, cwd: Path, environment: dict[str, str]) -> str:
    """A command that returns, as a terminal runs it; its output (it must succeed)."""
    process = await asyncio.create_subprocess_exec(
        *("bash", "-c", command),
        cwd=cwd,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    output = (await process.communicate())[0].decode(errors="replace")
    assert process.returncode == 0, f"$ {command}\n{output}"
    return output


def test_the_quick_start_names_the_clone_dev_and_demo() -> None:
    """What the end-to-end test below relies on: a clone to substitute, one command that keeps
    running (make dev), and the demo last."""
    steps = quick_start_steps()
    assert PLACEHOLDER in steps[0].command, steps
    assert [step.command for step in steps if step.keeps_running] == ["make dev"], steps
    assert steps[-1].command == "make demo", steps


async def test_the_quick_start_on_a_fresh_clone_ends_with_the_demo_passing(
    kube_double: KubeDouble, tmp_path: Path
) -> None:
    environment = user_environment(kube_double, tmp_path)
    cwd = tmp_path / "work"
    cwd.mkdir()
    dev: DevRun | None = None
    output = ""
    try:
        for step in quick_start_steps():
            command = step.command.replace(PLACEHOLDER, shlex.quote(str(REPO)))
            if command.startswith("cd "):
                cwd = cwd / shlex.split(command)[1]
                assert cwd.is_dir(), command
            elif step.keeps_running:
                assert dev is None, "one command keeps running in the first terminal"
                dev = await DevRun.start(
                    environment, tmp_path / "dev.out", ["bash", "-c", command], cwd
                )
                await dev.ready(within=420)
            else:
                output = await run_step(command, cwd, environment)
        print(output)
        assert dev is not None
        assert cwd != REPO, cwd
        assert (cwd / ".git").is_dir(), cwd
        summary = output.rstrip().splitlines()[-1]
        passed = PASSED.match(summary)
        assert passed is not None, output
        assert int(passed.group(1)) >= 4, output
        await dev.interrupt()
        assert dev.leftovers() == []
        assert "dev: stopped" in dev.text(), dev.text()
    finally:
        if dev is not None:
            await dev.stop()
