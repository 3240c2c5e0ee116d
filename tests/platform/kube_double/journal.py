"""The requests the double answered, for a test that asserts what a client sent (the order of a
`kubectl drain`'s calls, that it evicted rather than deleted), not only what it left behind."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exchange:
    """One request and the status it was answered with (a watch: when its stream ended)."""

    method: str
    path: str
    query: dict[str, str]
    status: int
