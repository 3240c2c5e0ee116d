"""A service run as its own process until it kills itself at one step of a write path, by SIGKILL
or SIGTERM (the runtime's test-only checkpoints, `hostaffinity.runtime.process.checkpoints`);
then its successor runs in-process over what it left, and the test checks each change is in
Kubernetes or vCenter and on the bus exactly once."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import yaml

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.checkpoints import KILL_AT_ENV, PASSED_ENV, WritePath
from hostaffinity.runtime.process.config import ServiceSettings
from hostaffinity.schema import TopologyEvent
from tests.e2e.labeller_harness import stream_events

SIGNALS = ("SIGKILL", "SIGTERM")
# A run reaches its step within this, or the test fails showing the run's log.
REACH_SECONDS = 40.0
# SIGTERM: the runner's drain, then the exit.
STOP_SECONDS = 30.0


def kill_cases(path: WritePath) -> list[object]:
    """One case per (checkpoint, signal) of the path, named `<checkpoint>-<signal>`."""
    return [
        pytest.param(checkpoint, signame, id=f"{checkpoint}-{signame}")
        for checkpoint in path.checkpoints
        for signame in SIGNALS
    ]


@dataclass(frozen=True)
class Killed:
    """What the killed run left: the steps it passed, in order, and its log."""

    passed: list[str]
    log: str


async def run_until_killed(
    module: str, config: ServiceSettings, tmp_path: Path, checkpoint: str, signame: str
) -> Killed:
    """`python -m <module> --config <config>` with `checkpoint` armed; returns once it has
    ended as the signal ends it (SIGKILL: at once; SIGTERM: the runner's stop, exit 0)."""
    config_path = tmp_path / "killed.yaml"
    config_path.write_text(yaml.safe_dump(msgspec.to_builtins(config)))
    passed_path, log_path = tmp_path / "passed", tmp_path / "killed.log"
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("HOSTAFFINITY_")
    }
    environment |= {KILL_AT_ENV: f"{checkpoint}:{signame}", PASSED_ENV: str(passed_path)}
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            "--config",
            str(config_path),
            env=environment,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
    try:
        code = await asyncio.wait_for(process.wait(), REACH_SECONDS + STOP_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(
            f"{module} never ended at {checkpoint}:\n{log_path.read_text()}"
        ) from None
    text = log_path.read_text(errors="replace")
    passed = passed_path.read_text().split() if passed_path.exists() else []
    assert checkpoint in passed, f"the run ended before {checkpoint} ({passed}):\n{text}"
    expected = -9 if signame == "SIGKILL" else 0
    assert code == expected, f"exit {code} after {signame} at {checkpoint}:\n{text}"
    return Killed(passed, text)


def assert_passed_in_order(killed: Killed, path: WritePath, checkpoint: str) -> None:
    """The run went through the path's steps in their order, up to the one it was killed at:
    a step listed but never reached, or reached out of order, is a list gone stale. Concurrent
    runs of the path interleave: each step counts where it was first reached."""
    reached = list(dict.fromkeys(name for name in killed.passed if name in path.checkpoints))
    upto = path.checkpoints[: path.checkpoints.index(checkpoint) + 1]
    assert reached[: len(upto)] == list(upto), (reached, upto)


async def stored_once(bus: Bus) -> list[TopologyEvent]:
    """Every event on the stream, after checking that no id is stored twice."""
    events = await stream_events(bus)
    twice = [i for i, n in Counter(e.id for e in events).items() if n > 1]
    assert not twice, f"event ids stored more than once: {twice}"
    return events
