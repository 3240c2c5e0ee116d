"""The previous release, built from its own git worktree into a venv of its own: the upgrade
campaign's old replicas run from it, so it must be that release's code, found with or without
its tag, and a clone holding neither must say so."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.platform.previous_release import (
    PREVIOUS_RELEASE,
    PREVIOUS_VERSION,
    REPO,
    PreviousReleaseMissing,
    previous_commit,
    previous_release_venv,
)

TAG, COMMIT = PREVIOUS_RELEASE


def test_the_previous_release_is_found_by_its_commit_where_the_clone_lacks_its_tag() -> None:
    by_commit = previous_commit(("v0.0.0-never-tagged", COMMIT))
    assert by_commit.startswith(COMMIT)
    assert len(by_commit) == 40
    assert previous_commit() == by_commit  # the tag, where present, names the same commit


def test_a_clone_without_the_previous_release_fails_loudly() -> None:
    with pytest.raises(PreviousReleaseMissing, match=re.escape("v0.0.0-never-tagged or 0000000")):
        previous_commit(("v0.0.0-never-tagged", "0000000"))


def test_the_previous_release_venv_runs_that_release_s_own_code() -> None:
    venv = previous_release_venv()
    version = subprocess.run(
        [str(venv / "bin" / "hostaffinity"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == f"hostaffinity {PREVIOUS_VERSION}"
    # Installed into the venv (not an editable link to a worktree) and not this tree's code:
    # 0.1.0 had no drs_names module (the install-qualified DRS names came after).
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util, hostaffinity.drs_translator as t; print(t.__file__); "
            "print(importlib.util.find_spec('hostaffinity.schema.drs_names') is None)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    module, no_drs_names = probe.stdout.split()
    assert module.startswith(str(venv))
    assert no_drs_names == "True"
    for service in ("node-labeller", "drs-translator", "descheduler", "admission-webhook"):
        assert (venv / "bin" / f"hostaffinity-{service}").exists(), service
    # The worktree it was built from is gone again: no stray worktree left in the clone.
    worktrees = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv.parent / "source") not in worktrees
