"""The previous release installed from its own source: a detached git worktree of its tag (or,
where a fresh clone lacks the tag, of its commit) built into a venv of its own, so the upgrade
campaign can run that release's services beside this tree's.

Nothing of the release comes from a registry: its libraries and services are built from the
worktree (`uv sync --no-editable`); its third-party dependencies are the versions its own
uv.lock pins, from uv's cache (PyPI only where the cache lacks one). The venv is cached under
.cache/previous-release/<commit>/ and built once per commit, under a lock, so parallel tests
share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
# The release before this tree's: tag v0.1.0, made at commit 6f1d8ec (main before issue 42). A
# fresh clone may come without the tag, so the commit stands in for it; one of them must be in
# the clone's history (a shallow clone has neither: fetch with full history).
PREVIOUS_RELEASE: Final = ("v0.1.0", "6f1d8ec")
PREVIOUS_VERSION: Final = "0.1.0"
CACHE: Final = REPO / ".cache" / "previous-release"
BUILT: Final = "built"  # the marker a finished venv carries


class PreviousReleaseMissing(RuntimeError):
    """Neither the tag nor the commit of the previous release is in this clone."""


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done.stdout.strip()


def previous_commit(candidates: tuple[str, ...] = PREVIOUS_RELEASE) -> str:
    """The full commit id of the first candidate (tag, then commit) this clone holds. A shallow
    clone (many CI systems clone at depth 1) first fetches its own history from its origin."""
    found = _first_held(candidates)
    if found is None and _git("rev-parse", "--is-shallow-repository") == "true":
        with contextlib.suppress(subprocess.CalledProcessError):
            _git("fetch", "--quiet", "--unshallow", "--tags")
        found = _first_held(candidates)
    if found is None:
        raise PreviousReleaseMissing(
            f"the previous release ({' or '.join(candidates)}) is not in this clone's history: "
            "fetch the tags, or clone with full history (git fetch --unshallow --tags)"
        )
    return found


def _first_held(candidates: tuple[str, ...]) -> str | None:
    for candidate in candidates:
        try:
            return _git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
        except subprocess.CalledProcessError:
            continue
    return None


def previous_release_venv(commit: str | None = None) -> Path:
    """The venv holding the previous release's services (its bin/ has their console scripts),
    built on first use."""
    commit = commit or previous_commit()
    home = CACHE / commit
    venv = home / "venv"
    home.mkdir(parents=True, exist_ok=True)
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / BUILT).exists():
            _build(commit, home, venv)
    return venv


def _build(commit: str, home: Path, venv: Path) -> None:
    source = home / "source"
    shutil.rmtree(venv, ignore_errors=True)
    _remove_worktree(source)
    _git("worktree", "add", "--detach", str(source), commit)
    try:
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        env["UV_PROJECT_ENVIRONMENT"] = str(venv)
        subprocess.run(
            [
                "uv",
                "sync",
                "--frozen",  # its own uv.lock, as it stands in the release
                "--all-packages",
                "--no-dev",
                "--no-editable",  # built into the venv: the worktree can go
                "--quiet",
            ],
            cwd=source,
            env=env,
            check=True,
        )
    finally:
        _remove_worktree(source)
    (venv / BUILT).write_text(commit + "\n", encoding="utf-8")


def _remove_worktree(source: Path) -> None:
    if source.exists():
        _git("worktree", "remove", "--force", str(source))
    _git("worktree", "prune")
