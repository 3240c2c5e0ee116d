"""Plain-text tables for the terminal: left-aligned columns sized to their widest cell."""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The header and rows as aligned columns, one line each (no trailing spaces)."""
    widths = [len(cell) for cell in header]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    lines = [
        GAP.join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
    return "\n".join(lines)
