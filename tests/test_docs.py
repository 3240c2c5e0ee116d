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
