"""Where the recorded fixtures are: `tests/fixtures/<set>/`, inside the repository (see its
README for where each set was recorded).

A missing set is a failure that names the path looked for, never a skip and never an empty
parametrization: a test that silently ran on nothing would pass for the wrong reason. The one
override, `RECORDED_FIXTURES_DIR`, exists so a test can prove exactly that failure.
"""

import os
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
OVERRIDE_ENV = "RECORDED_FIXTURES_DIR"


class MissingFixtures(RuntimeError):
    """The recorded fixtures are not where the tests look for them."""


def fixtures_root() -> Path:
    """`tests/fixtures` (or the override)."""
    return Path(os.environ.get(OVERRIDE_ENV) or REPOSITORY / "tests" / "fixtures")


def fixture_dir(name: str) -> Path:
    """`tests/fixtures/<name>`; raises, naming the path, when it is not a folder."""
    path = fixtures_root() / name
    if not path.is_dir():
        raise MissingFixtures(f"recorded fixtures not found: {path} is not a folder")
    return path


def fixture_files(name: str, pattern: str) -> list[Path]:
    """The files of `tests/fixtures/<name>` matching `pattern`, sorted; at least one."""
    folder = fixture_dir(name)
    files = sorted(folder.glob(pattern))
    if not files:
        raise MissingFixtures(f"recorded fixtures not found: no {pattern} in {folder}")
    return files
