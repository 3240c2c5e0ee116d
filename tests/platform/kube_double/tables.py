"""The meta.k8s.io/v1 Table a client gets when it asks for one (`kubectl get` does, in its
Accept header), for the resources whose printer columns the double knows (`registry/`).

The shape is the server's (apimachinery pkg/apis/meta/v1/types.go `Table`, `TableColumnDefinition`,
`TableRow`): the columns, one row per object with its cells, and each row's object as
PartialObjectMetadata, the server's default `includeObject=Metadata`. A resource without
columns here is answered as a plain list, which kubectl prints with its own fallback columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_TABLE_MEDIA = "as=Table"
_TABLE_GROUP = "g=meta.k8s.io"


@dataclass(frozen=True)
class Column:
    """One TableColumnDefinition; priority 1 columns are shown by `-o wide` only."""

    name: str
    description: str
    format: str = ""
    priority: int = 0


@dataclass(frozen=True)
class Printer:
    """A resource's columns and how one stored object fills them (given the time now)."""

    columns: Sequence[Column]
    cells: Callable[[dict[str, Any], datetime], list[Any]]


def wants_table(accept: str) -> bool:
    """True when the Accept header asks for a meta.k8s.io Table (in any of its versions)."""
    return any(_TABLE_MEDIA in part and _TABLE_GROUP in part for part in accept.split(","))


def table(
    printer: Printer, objects: Sequence[dict[str, Any]], metadata: dict[str, Any]
) -> dict[str, Any]:
    """The Table of `objects` (stored form), with the list's own metadata (resourceVersion,
    continue) as the server gives it."""
    now = datetime.now(UTC)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": c.name,
                "type": "string",
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in printer.columns
        ],
        "rows": [
            {
                "cells": printer.cells(obj, now),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
            for obj in objects
        ],
    }


def age(obj: dict[str, Any], now: datetime) -> str:
    """The AGE cell: time since creation, in the server's short form (apimachinery
    pkg/util/duration HumanDuration: `45s`, `3m12s`, `5h2m`, `3d4h`, `2y30d`)."""
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    since = datetime.fromisoformat(created.replace("Z", "+00:00"))
    return human_duration(int((now - since).total_seconds()))


def human_duration(seconds: int) -> str:
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if minutes < 10:
        return _pair(minutes, "m", seconds % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return _pair(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _pair(days, "d", hours % 24, "h")
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return _pair(days // 365, "y", days % 365, "d")
    return f"{days // 365}y"


def _pair(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}" if small == 0 else f"{big}{big_unit}{small}{small_unit}"
