"""The repository stands on its own: no machine's absolute paths, nothing that points outside
it, and the recorded fixtures are inside it or their absence fails loudly, naming where they
were looked for."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.recorded_fixtures import (
    OVERRIDE_ENV,
    REPOSITORY,
    MissingFixtures,
    fixture_dir,
)

# The founders' folder beside their checkout, which a user's clone does not have.
# Also as a quoted path part joined by `/` (parents[n] / that folder / ...), which needs no `../`.
OUTSIDE = re.compile(r"\.\./" + 'shared|"' + 'shared"\\s*(/|$)')

# A quoted or spaced absolute path into one machine's directories (as the shared before-stop hook
# looks for them); the pattern is split so that this file does not match itself.
MACHINE_PATH = re.compile("[\"' ](/" + "(?:work|root|home|tmp))/[A-Za-z]")
TRACKED = ("*.py", "*.sh", "*.yaml", "*.yml", "*.toml", "*.md", "*.conf", "Makefile")
FIXTURE_TESTS = (
    "libs/affinity/tests/test_oracle.py",
    "libs/affinity/tests/test_model.py",
    "services/scheduler-extender/tests/test_http.py",
    "services/admission-webhook/tests/test_admission.py",
    "tests/integration/test_webhook.py",
    "tests/contract/test_kube_double_contract.py",
)


def _tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *TRACKED],
        cwd=REPOSITORY,
        capture_output=True,
        check=True,
    )
    return [REPOSITORY / name for name in listed.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_an_absolute_machine_path() -> None:
    files = _tracked_files()
    assert any(f.name == "pyproject.toml" for f in files), "git ls-files listed the repository"
    offenders = [
        f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert offenders == []


def test_nothing_tracked_points_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(REPOSITORY)}:{number}"
        for path in _tracked_files()
        if path.is_file()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []


def test_the_machine_path_check_catches_one() -> None:
    assert MACHINE_PATH.search('ORACLE = Path("/' + 'work/shared/fixtures")')
    assert not MACHINE_PATH.search('ORACLE = fixture_dir("kube-scheduler-oracle")')


def test_a_missing_fixture_folder_is_an_error_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OVERRIDE_ENV, str(tmp_path / "moved-away"))
    with pytest.raises(MissingFixtures, match=re.escape(str(tmp_path / "moved-away"))):
        fixture_dir("kube-apiserver")


def test_fixture_based_tests_fail_when_shared_is_unreachable(tmp_path: Path) -> None:
    """Collected with the fixtures out of reach, every fixture-based module fails loudly."""
    missing = tmp_path / "no-fixtures-here"
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *FIXTURE_TESTS,
        ],
        cwd=REPOSITORY,
        env={**os.environ, OVERRIDE_ENV: str(missing)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = collected.stdout + collected.stderr
    assert collected.returncode != 0, output
    assert "skipped" not in output
    assert "empty parameter set" not in output
    for module in FIXTURE_TESTS:
        assert f"ERROR {module}" in output, output
    assert output.count(f"recorded fixtures not found: {missing}/") >= len(FIXTURE_TESTS)
