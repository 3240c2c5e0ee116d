"""Whether proto/ still serves a subscriber built against an earlier release's proto/.

A subscriber decodes with the schemas it was built with and ignores what it does not know
(docs/subscribing.md). So a newer release may add optional fields and new event types, and may
never: remove a message (event type, KV value) or its channel, remove a field, change a field's
schema (its type, format, enum or items; a description or default may change), or make a field
required that was not (events written by the older release, still in the stream, lack it).

Reads two folders laid out as proto/ is (`asyncapi.json`, `schemas/<Message>.json`); pure
otherwise. Follows msgspec's schema-evolution rules (jcrist/msgspec docs/schema-evolution.rst).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Keys of a property's schema that document it rather than constrain what a reader accepts.
_DOCUMENTING = frozenset({"description", "default", "title", "examples"})


def breaking_changes(released: Path, current: Path) -> list[str]:
    """Every change from `released` to `current` that breaks a subscriber of `released`."""
    problems = _removed_channels(
        _load(released / "asyncapi.json"), _load(current / "asyncapi.json")
    )
    for old_file in sorted((released / "schemas").glob("*.json")):
        new_file = current / "schemas" / old_file.name
        if not new_file.exists():
            problems.append(f"{old_file.stem}: message removed")
            continue
        old_defs = _load(old_file).get("$defs", {})
        new_defs = _load(new_file).get("$defs", {})
        for name, old in sorted(old_defs.items()):
            problems += _struct_changes(f"{old_file.stem}/{name}", old, new_defs.get(name))
    return problems


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def _removed_channels(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    addresses = {channel["address"] for channel in new.get("channels", {}).values()}
    return [
        f"channel {channel['address']}: removed (an event type is never removed)"
        for channel in old.get("channels", {}).values()
        if channel["address"] not in addresses
    ]


def _struct_changes(where: str, old: dict[str, Any], new: dict[str, Any] | None) -> list[str]:
    if new is None:
        return [f"{where}: definition removed"]
    problems = []
    old_properties = old.get("properties", {})
    new_properties = new.get("properties", {})
    for field, schema in sorted(old_properties.items()):
        if field not in new_properties:
            problems.append(f"{where}.{field}: field removed")
        elif _constraint(schema) != _constraint(new_properties[field]):
            problems.append(
                f"{where}.{field}: schema changed from {_constraint(schema)} "
                f"to {_constraint(new_properties[field])}"
            )
    for field in sorted(set(new.get("required", [])) - set(old.get("required", []))):
        problems.append(f"{where}.{field}: newly required")
    if old.get("enum") != new.get("enum") or old.get("type") != new.get("type"):
        problems.append(f"{where}: schema changed from {_constraint(old)} to {_constraint(new)}")
    return problems


def _constraint(schema: Any) -> Any:
    """The schema without its documentation, nested schemas included."""
    if isinstance(schema, dict):
        return {k: _constraint(v) for k, v in schema.items() if k not in _DOCUMENTING}
    if isinstance(schema, list):
        return [_constraint(item) for item in schema]
    return schema
