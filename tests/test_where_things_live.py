"""docs/where-things-live.md, the newcomer's map of the code: every path it names exists, and
design.md links it first."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "where-things-live.md"
# A path in backticks: a dotfile at the root, or segments joined by '/'; a placeholder such as
# `services/<service>/tests/` is a pattern, not a path, and is left out.
_PATH = re.compile(r"\.[\w-]+|[\w.-]+(?:/[\w.-]*)+")


def named_paths(text: str) -> list[str]:
    """Every path the page names in backticks, in order."""
    return [code for code in re.findall(r"`([^`]+)`", text) if _PATH.fullmatch(code)]


def missing(text: str, root: Path) -> list[str]:
    return [path for path in named_paths(text) if not (root / path).exists()]


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(named_paths(text)) >= 60, "the page names fewer paths than its table holds"
    assert missing(text, REPO) == []


def test_a_path_that_does_not_exist_is_named() -> None:
    text = (
        "| the planner | `services/node-labeller/src/hostaffinity/node_labeller/planner.py` |\n"
        "| the rules | `.importlinter`, `services/<service>/tests/`, `main.py` |\n"
    )
    assert named_paths(text) == [
        "services/node-labeller/src/hostaffinity/node_labeller/planner.py",
        ".importlinter",
    ]
    assert missing(text, REPO) == [
        "services/node-labeller/src/hostaffinity/node_labeller/planner.py"
    ]


def test_the_design_page_links_it_before_anything_else() -> None:
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    first_link = re.search(r"\]\(([^)]+)\)", design)
    assert first_link is not None
    assert first_link[1] == "where-things-live.md"
