"""Where tests and their helpers live: one import root, and a member's `tests/` holds tests only.

A helper module in a member's `tests/` could only be imported by putting that folder on pytest's
path (its name has a hyphen: `services/node-labeller`), which is what the builders package
`tests/platform/builders/` replaced (docs/development.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.recorded_fixtures import REPOSITORY

# What pytest itself reads from a test folder, besides the tests.
_PYTEST_FILES = ("conftest.py", "__init__.py")


def member_test_modules() -> list[Path]:
    return sorted(
        path
        for pattern in ("libs/*/tests/**/*.py", "services/*/tests/**/*.py")
        for path in REPOSITORY.glob(pattern)
    )


def test_a_members_tests_folder_holds_only_tests() -> None:
    modules = member_test_modules()
    assert modules, "no member test modules found: the globs are wrong"
    helpers = [
        str(path.relative_to(REPOSITORY))
        for path in modules
        if not path.name.startswith("test_") and path.name not in _PYTEST_FILES
    ]
    assert helpers == [], f"helpers belong in tests/platform/builders/: {helpers}"


def test_the_repository_root_is_the_one_import_root() -> None:
    config = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["pythonpath"] == ["."]
