"""Test-only checkpoints: nothing unless the environment arms one; armed, the process sends
itself the signal there, once, and records every step it passes when asked to."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostaffinity.runtime.process.checkpoints import KILL_AT_ENV, PASSED_ENV, _armed

PROGRAM = """
import signal, sys, time
from hostaffinity.runtime.process.checkpoints import WritePath
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM", flush=True))
path = WritePath("demo", ("one", "two"))
for step in ("one", "two", "two"):
    path.checkpoint(step)
    print("after", step, flush=True)
"""


def run(tmp_path: Path, **env: str) -> tuple[int, str, list[str]]:
    passed = tmp_path / "passed"
    environment = (
        {k: v for k, v in os.environ.items() if k not in (KILL_AT_ENV, PASSED_ENV)}
        | {PASSED_ENV: str(passed)}
        | env
    )
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=environment, capture_output=True, text=True, timeout=60
    )
    steps = passed.read_text().split() if passed.exists() else []
    return done.returncode, done.stdout, steps


def test_unarmed_it_records_the_steps_passed_and_nothing_else(tmp_path: Path) -> None:
    code, out, steps = run(tmp_path)
    assert code == 0
    assert out.split("\n")[:3] == ["after one", "after two", "after two"]
    assert steps == ["demo.one", "demo.two", "demo.two"]


def test_sigkill_ends_the_process_at_the_step(tmp_path: Path) -> None:
    code, out, steps = run(tmp_path, **{KILL_AT_ENV: "demo.two:SIGKILL"})
    assert code == -9
    assert out == "after one\n"
    assert steps == ["demo.one", "demo.two"]


def test_sigterm_is_sent_once_at_the_step(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, **{KILL_AT_ENV: "demo.two:SIGTERM"})
    assert code == 0
    assert out.count("SIGTERM") == 1
    assert out.index("after one") < out.index("SIGTERM")


def test_a_malformed_setting_fails_at_once() -> None:
    with pytest.raises(ValueError, match=KILL_AT_ENV):
        _armed({KILL_AT_ENV: "demo.two:SIGHUP"})
    assert _armed({}) == {}
