"""Running a console entry point (a service's `main`, through its runner) in the test's process,
as its script would run: the exit status and what it wrote, with only the HOSTAFFINITY_*
environment the test sets."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from hostaffinity.cli.main import main as cli_main

ENV_PREFIX = "HOSTAFFINITY_"


def run_console(
    main: Callable[[Sequence[str] | None], None],
    argv: Sequence[str],
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str]:
    """`main(argv)`: (exit status, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), captured.out, captured.err


def exit_code(argv: Sequence[str]) -> int:
    """`hostaffinity` main()'s exit status; the log handler it installs on the captured stderr
    is removed after, so later tests do not log into a closed stream."""
    handlers = list(logging.root.handlers)
    try:
        cli_main(list(argv))
    except SystemExit as exited:
        return int(exited.code or 0)
    finally:
        logging.root.handlers = handlers
    raise AssertionError("main() always exits")


def clear_hostaffinity_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what the test sets: a developer's HOSTAFFINITY_* would change the outcome."""
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)


# Where the environment installs the console scripts (hostaffinity-*), to run them as a process.
SCRIPTS = Path(sys.executable).parent


@contextlib.contextmanager
def children_get_ctrl_c() -> Iterator[None]:
    """While children are started in the block, they start with SIGINT at its default, so a
    Python among them turns Ctrl-C into KeyboardInterrupt. A test run started in the background
    by a shell without job control (`pytest ... &`) has SIGINT ignored, and an ignored signal
    stays ignored across exec; a caught one is reset to its default there, so for the block this
    process catches it (main thread only, as signal.signal requires)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
