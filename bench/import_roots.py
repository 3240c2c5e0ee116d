"""Puts pytest's import roots on sys.path, so a bench imports test helpers as the tests do.

The roots are read from pyproject.toml ([tool.pytest.ini_options] pythonpath: the repository
root, for `tests.platform...`, the builders in `tests.platform.builders` among them), so tests
and benches share one list. A bench imports this module first, as `bench/x.py` run by
`uv run --frozen python bench/x.py` has only bench/ itself on its path.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install() -> None:
    """Prepend every root pytest uses (in pytest's order) that is not on sys.path yet."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    roots = [str(REPO / root) for root in config["tool"]["pytest"]["ini_options"]["pythonpath"]]
    sys.path[:0] = [root for root in roots if root not in sys.path]


install()
