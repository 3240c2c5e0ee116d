"""Where tests and their helpers live: one import root, a member's `tests/` holds tests only, and
every test module has a kind by its place (tests/kinds.py), which keeps real parts out of the
fast loop.

A helper module in a member's `tests/` could only be imported by putting that folder on pytest's
path (its name has a hyphen: `services/node-labeller`), which is what the builders package
`tests/platform/builders/` replaced (docs/development.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.kinds import KIND_NAMES, KINDS, kind_of, refuse_in_fast_tests
from tests.platform.nats import NatsServer
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


def test_every_test_module_has_a_kind() -> None:
    modules = [
        path.relative_to(REPOSITORY).as_posix()
        for pattern in (
            "libs/*/tests/**/test_*.py",
            "services/*/tests/**/test_*.py",
            "tests/**/test_*.py",
        )
        for path in REPOSITORY.glob(pattern)
    ]
    assert len(modules) > 150, "the globs find too few test modules"
    assert [m for m in modules if kind_of(m) is None] == []
    assert set(KINDS.values()) == set(KIND_NAMES)


def test_the_longest_listed_place_gives_the_kind() -> None:
    assert kind_of("services/descheduler/tests/test_cycle_scratch.py") == "unit"
    assert kind_of("tests/contract/test_kube_double_contract.py") == "contract"
    assert kind_of("tests/monitoring/test_prometheus_e2e.py") == "e2e"
    assert kind_of("tests/monitoring/test_monitoring_rules.py") == "integration"
    assert kind_of("tests/test_docs.py") == "unit"
    assert kind_of("tests/test_docs.pyc") is None  # a prefix of the name is not the place
    assert kind_of("tests/test_new_module.py") is None


def test_this_module_runs_as_a_unit_test(request: pytest.FixtureRequest) -> None:
    kinds = [name for name in KIND_NAMES if request.node.get_closest_marker(name)]
    assert kinds == ["unit"]


def test_a_fast_test_that_starts_a_vcsim_fails() -> None:
    with pytest.raises(RuntimeError, match="a unit test started a vcsim"):
        refuse_in_fast_tests("a vcsim")


async def test_a_unit_test_cannot_start_a_nats_server(tmp_path: Path) -> None:
    server = NatsServer(tmp_path)
    with pytest.raises(RuntimeError, match="is an integration test"):
        await server.start()
    assert not server.log_file.exists()  # refused before the process was started
