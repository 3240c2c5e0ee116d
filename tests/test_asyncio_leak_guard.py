"""The leaked-task guard itself: a test that forgets a task fails at teardown, naming it; a test
that awaits or cancels what it started passes."""

import subprocess
import sys
from pathlib import Path

from tests.recorded_fixtures import REPOSITORY

SAMPLE = """
import asyncio

async def test_forgets_a_task() -> None:
    asyncio.create_task(asyncio.sleep(3600), name="forgotten-sleeper")

async def test_awaits_what_it_started() -> None:
    task = asyncio.create_task(asyncio.sleep(3600))
    task.cancel()

def test_sync() -> None:
    assert True
"""


def test_a_forgotten_task_fails_its_test(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.asyncio_leaks",
            "-c",
            str(REPOSITORY / "pyproject.toml"),
            str(sample),
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output
    assert "ERROR at teardown of test_forgets_a_task" in output
    assert "forgotten-sleeper" in output
    assert "3 passed, 1 error" in output
