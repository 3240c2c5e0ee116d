"""Test-only: the named steps of a write path, where a test may have the process kill itself.

Each write path (the descheduler's eviction and migration, the drs-translator's DRS apply, the
node-labeller's label write) declares its steps once, as a `WritePath`, and calls
`path.checkpoint("step")` between its awaits. In production that is one dict lookup that finds
nothing. A test (tests/e2e/test_kill_at_every_step.py) starts the service with

    TEST_KILL_AT_CHECKPOINT=<path>.<step>:SIGKILL   (or :SIGTERM)

and the process sends itself that signal the first time it reaches the step: SIGKILL ends it
there, SIGTERM starts the runner's graceful stop, which cancels the work at its next await. With
`TEST_CHECKPOINTS_PASSED=<file>` every step reached is appended to the file, one name a line, so
the test knows a run went through each step it lists. Neither variable starts with
`HOSTAFFINITY_`, so the config loader never reads them. Nothing but these tests may depend on
this module's behaviour: product code only calls `checkpoint`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Final

KILL_AT_ENV: Final = "TEST_KILL_AT_CHECKPOINT"
PASSED_ENV: Final = "TEST_CHECKPOINTS_PASSED"
SIGNALS: Final = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}


def _armed(environ: Mapping[str, str]) -> dict[str, signal.Signals]:
    """The checkpoint the environment names, with its signal; a malformed value fails at once."""
    value = environ.get(KILL_AT_ENV, "")
    if not value:
        return {}
    name, _, signame = value.rpartition(":")
    if not name or signame not in SIGNALS:
        raise ValueError(f"{KILL_AT_ENV}={value!r}: expected <path>.<step>:SIGKILL|SIGTERM")
    return {name: SIGNALS[signame]}


# Read once at import: a process is started with them or not.
_ARMED: dict[str, signal.Signals] = _armed(os.environ)
_PASSED: str = os.environ.get(PASSED_ENV, "")


class WritePath:
    """A write path's steps, in the order a run passes them; `checkpoint` marks each."""

    def __init__(self, name: str, steps: tuple[str, ...]) -> None:
        self.name = name
        self.steps = steps
        self.checkpoints = tuple(f"{name}.{step}" for step in steps)
        self._by_step = dict(zip(steps, self.checkpoints, strict=True))

    def checkpoint(self, step: str) -> None:
        """Nothing, unless a test armed this step (see the module's docstring)."""
        if not _ARMED and not _PASSED:
            return
        _reached(self._by_step[step])


def _reached(name: str) -> None:
    if _PASSED:
        with open(_PASSED, "a", encoding="utf-8") as passed:
            passed.write(name + "\n")
    signum = _ARMED.pop(name, None)
    if signum is not None:
        os.kill(os.getpid(), signum)
