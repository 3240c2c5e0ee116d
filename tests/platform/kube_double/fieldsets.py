"""managedFields: who owns which field, for Update writes and for server-side apply.

A simplification of structured-merge-diff: lists are atomic (owned whole), maps are owned key by
key. That reproduces every recorded ownership outcome (labels, annotations, `spec.taints`).
Entries whose `fieldsV1` is opaque (the scrubbed `"<omitted>"` of a seed) are kept untouched.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

Path = tuple[str, ...]
_MISSING = object()
_IGNORED_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    }
)


@dataclass(frozen=True)
class Conflict:
    manager: str
    api_version: str
    path: Path

    @property
    def field(self) -> str:
        return "".join("." + part[2:] for part in self.path)


class ApplyConflict(Exception):
    """Applying would change fields another manager owns."""

    def __init__(self, conflicts: list[Conflict]):
        super().__init__(conflicts)
        self.conflicts = conflicts


def leaves(obj: dict[str, Any]) -> dict[Path, Any]:
    """Owned-field paths of an object (maps by key, lists whole) and their values."""
    result: dict[Path, Any] = {}

    def walk(node: dict[str, Any], prefix: Path) -> None:
        for key, value in node.items():
            if not prefix and key in ("apiVersion", "kind"):
                continue
            if prefix == ("f:metadata",) and key in _IGNORED_META:
                continue
            path = (*prefix, f"f:{key}")
            if isinstance(value, dict) and value:
                walk(value, path)
            else:
                result[path] = value

    walk(obj, ())
    return result


def _paths(fields: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, value in fields.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            out |= _paths(value, path)
        else:
            out.add(path)
    return out


def _fields(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    return root


def _covered(path: Path, dropped: set[Path]) -> bool:
    return any(path[: len(d)] == d for d in dropped)


def _owned(entry: dict[str, Any]) -> set[Path] | None:
    fields = entry.get("fieldsV1")
    return _paths(fields) if isinstance(fields, dict) else None


def _entry(
    manager: str, operation: str, api_version: str, now: str, sub: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }
    if sub:
        entry["subresource"] = sub
    return entry


def _finish(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop emptied entries; order Apply first, then by time, as structured-merge-diff sorts."""
    kept = [e for e in entries if not (isinstance(e.get("fieldsV1"), dict) and not e["fieldsV1"])]
    return sorted(kept, key=lambda e: (e["operation"] != "Apply", e.get("time", "")))


def record_update(
    entries: list[dict[str, Any]],
    *,
    manager: str,
    api_version: str,
    subresource: str | None,
    old: dict[str, Any],
    new: dict[str, Any],
    now: str,
) -> list[dict[str, Any]]:
    """Give `manager` the fields this write changed and take them from everyone else."""
    before, after = leaves(old), leaves(new)
    changed = {p for p, v in after.items() if before.get(p, _MISSING) != v}
    removed = set(before) - set(after)
    if not changed and not removed:
        return entries
    entries = copy.deepcopy(entries)
    for entry in entries:
        owned = _owned(entry)
        if owned is not None:
            entry["fieldsV1"] = _fields({p for p in owned if not _covered(p, changed | removed)})
    target = next(
        (
            e
            for e in entries
            if e["manager"] == manager
            and e["operation"] == "Update"
            and e.get("subresource") == subresource
            and e["apiVersion"] == api_version
        ),
        None,
    )
    if target is None:
        target = _entry(manager, "Update", api_version, now, subresource)
        entries.append(target)
    target["time"] = now
    owned = _owned(target)
    if owned is not None:
        new_maps = {
            (*p[:i], ".")
            for p in changed
            for i in range(2, len(p))
            if not any(q[:i] == p[:i] for q in before)
        }
        target["fieldsV1"] = _fields(owned | changed | new_maps)
    return _finish(entries)


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    node = obj
    for part in path[:-1]:
        node = node.setdefault(part[2:], {})
    node[path[-1][2:]] = copy.deepcopy(value)


def _delete(obj: dict[str, Any], path: Path) -> None:
    node: Any = obj
    for part in path[:-1]:
        node = node.get(part[2:]) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1][2:], None)


def apply(
    entries: list[dict[str, Any]],
    *,
    manager: str,
    api_version: str,
    current: dict[str, Any],
    config: dict[str, Any],
    force: bool,
    now: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Server-side apply of `config` by `manager`; raises ApplyConflict unless forced."""
    applied = leaves(config)
    present = leaves(current)
    entries = copy.deepcopy(entries)
    mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Apply"), None)
    others = [e for e in entries if e is not mine]
    conflicts = [
        Conflict(e["manager"], e["apiVersion"], path)
        for path, value in applied.items()
        if present.get(path, _MISSING) != value
        for e in others
        if path in (_owned(e) or set())
    ]
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    taken = {c.path for c in conflicts}
    for entry in others:
        owned = _owned(entry)
        if owned is not None and taken:
            entry["fieldsV1"] = _fields({p for p in owned if p not in taken})
    result = copy.deepcopy(current)
    previously = (_owned(mine) or set()) if mine is not None else set()
    for path in previously - set(applied):
        if not any(path in (_owned(e) or set()) for e in others):
            _delete(result, path)
    for path, value in applied.items():
        _set(result, path, value)
    if mine is None:
        mine = _entry(manager, "Apply", api_version, now, None)
        entries.append(mine)
    mine["fieldsV1"] = _fields(set(applied))
    mine["time"] = now
    return result, _finish(entries)
