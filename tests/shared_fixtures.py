"""Where the recorded fixtures are: `../shared/fixtures/` beside the checkout, for every test.

Missing fixtures are a failure that names the path looked for, never a skip and never an empty
parametrization: a test that silently ran on nothing would pass for the wrong reason. The one
override, `SHARED_FIXTURES_DIR`, exists so a test can prove exactly that failure.
"""

import os
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
OVERRIDE_ENV = "SHARED_FIXTURES_DIR"


class MissingSharedFixtures(RuntimeError):
    """The shared fixtures are not where the tests look for them."""


def shared_dir() -> Path:
    """`../shared` beside the checkout (or the override)."""
    return Path(os.environ.get(OVERRIDE_ENV) or REPOSITORY.parent / "shared")


def shared_fixture_dir(name: str) -> Path:
    """`shared/fixtures/<name>`; raises, naming the path, when it is not a folder."""
    path = shared_dir() / "fixtures" / name
    if not path.is_dir():
        raise MissingSharedFixtures(
            f"shared fixtures not found: {path} is not a folder (expected ../shared beside the "
            f"checkout {REPOSITORY})"
        )
    return path


def shared_fixture_files(name: str, pattern: str) -> list[Path]:
    """The files of `shared/fixtures/<name>` matching `pattern`, sorted; at least one."""
    folder = shared_fixture_dir(name)
    files = sorted(folder.glob(pattern))
    if not files:
        raise MissingSharedFixtures(f"shared fixtures not found: no {pattern} in {folder}")
    return files
