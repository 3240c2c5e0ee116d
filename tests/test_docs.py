"""docs/: the generated reference pages match the code; a page that does not is reported."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def check(docs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/docs_reference.py", "--check", "--docs", str(docs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_generated_reference_pages_are_current() -> None:
    """docs/configuration.md and docs/events.md are what scripts/docs_reference.py makes now."""
    checked = check(REPO / "docs")
    assert checked.returncode == 0, checked.stderr


def test_a_page_that_differs_from_the_code_is_stale(tmp_path: Path) -> None:
    docs = shutil.copytree(REPO / "docs", tmp_path / "docs")
    page = docs / "configuration.md"
    page.write_text(page.read_text().replace("`drain_seconds`", "`drain_secs`"), encoding="utf-8")
    checked = check(docs)
    assert checked.returncode == 1
    assert "configuration.md" in checked.stderr
    assert "events.md" not in checked.stderr


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` as scripts/test.sh runs it (warnings are logged, and counted)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_docs_build_has_no_warning(tmp_path: Path) -> None:
    built = mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr


def test_a_warning_fails_the_docs_build(tmp_path: Path) -> None:
    """A link to a heading that is not there is a warning, and --strict makes it fatal."""
    docs = shutil.copytree(REPO / "docs", tmp_path / "docs")
    page = docs / "cli.md"
    page.write_text(page.read_text() + "\n[gone](install.md#no-such-heading)\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}"),
        encoding="utf-8",
    )
    built = mkdocs_build(config, tmp_path / "site")
    assert built.returncode == 1
    assert "#no-such-heading" in built.stderr


def test_the_test_script_builds_the_docs_so_that_a_warning_fails() -> None:
    """`--quiet` would keep warnings from being logged, so `--strict` would never count them."""
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    (line,) = [line for line in script.splitlines() if "mkdocs build" in line]
    assert "--strict" in line.split()
    assert not {"--quiet", "-q"} & set(line.split())
