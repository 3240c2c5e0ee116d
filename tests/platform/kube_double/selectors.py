"""Label and field selectors, parsed and matched the way apimachinery does."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import bad_request

Matcher = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^!=\s]+)\s*(==|!=|=)\s*(\S*)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a parenthesised value set."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _label_requirement(text: str) -> Callable[[dict[str, str]], bool]:
    if match := _SET_RE.match(text):
        key, op, raw_values = match.groups()
        values = {v.strip() for v in raw_values.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _OP_RE.match(text):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    stripped = text.strip()
    if stripped.startswith("!"):
        key = stripped[1:].strip()
        return lambda labels: key not in labels
    if re.fullmatch(r"[A-Za-z0-9_./-]+", stripped):
        return lambda labels: stripped in labels
    raise bad_request(f"unable to parse requirement: {text!r}")


def label_matcher(selector: str | None) -> Matcher:
    """Match `metadata.labels` against equality- and set-based requirements."""
    if not selector:
        return lambda _obj: True
    requirements = [_label_requirement(part) for part in _split_top_level(selector)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return matches


def field_value(obj: dict[str, Any], path: str) -> str:
    """A field's value as the field-label conversion renders it (missing is empty)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(selector: str | None, supported: frozenset[str]) -> Matcher:
    """Match `key=value`, `key==value`, `key!=value` terms on the supported field labels."""
    if not selector:
        return lambda _obj: True
    terms: list[tuple[str, bool, str]] = []
    for part in selector.split(","):
        match = _OP_RE.match(part)
        if match is None:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        key, op, value = match.groups()
        if key not in supported and key not in ("metadata.name", "metadata.namespace"):
            raise bad_request(f"field label not supported: {key}")
        terms.append((key, op != "!=", value))

    def matches(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, key) == value) is equal for key, equal, value in terms)

    return matches
