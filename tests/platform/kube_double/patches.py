"""The three non-apply patch formats: JSON merge (RFC 7386), strategic merge, JSON patch."""

from __future__ import annotations

import copy
from typing import Any

# Strategic-merge list merge keys for the lists the double's resources carry; any other list
# (for example `spec.taints`, which has no patchMergeKey) is replaced whole, as the server does.
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "podIPs": "ip",
    "hostIPs": "ip",
    "addresses": "type",
    "env": "name",
    "ports": "containerPort",
}


class PatchFailed(Exception):
    """A JSON patch operation could not be applied (the server answers 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, key: str = "") -> Any:
    """Merge maps like RFC 7386, but merge lists that have a merge key element by element."""
    if isinstance(patch, list):
        merge_key = MERGE_KEYS.get(key)
        if merge_key is None or not isinstance(target, list):
            return [_strip_directives(item) for item in patch]
        merged = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict):
                merged.append(item)
                continue
            existing = next(
                (i for i, old in enumerate(merged) if old.get(merge_key) == item.get(merge_key)),
                None,
            )
            if item.get("$patch") == "delete":
                if existing is not None:
                    del merged[existing]
            elif existing is None:
                merged.append(_strip_directives(item))
            else:
                merged[existing] = strategic_merge_patch(merged[existing], item)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return _strip_directives(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if name.startswith("$"):
            continue
        if value is None:
            result.pop(name, None)
        else:
            result[name] = strategic_merge_patch(result.get(name), value, name)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchFailed(f"invalid pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> tuple[Any, str]:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PatchFailed("path not found")
    return node, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    node, last = _parent(doc, _pointer(path))
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise PatchFailed("path not found")


def _add(doc: Any, path: str, value: Any) -> None:
    node, last = _parent(doc, _pointer(path))
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if index > len(node):
            raise PatchFailed("index out of range")
        node.insert(index, value)
    else:
        raise PatchFailed("parent is not a container")


def _remove(doc: Any, path: str) -> Any:
    value = _get(doc, path)
    node, last = _parent(doc, _pointer(path))
    if isinstance(node, dict):
        del node[last]
    else:
        del node[int(last)]
    return value


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 on a copy; any failing operation (including `test`) raises PatchFailed."""
    doc = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _remove(doc, path)
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchFailed("test failed")
        else:
            raise PatchFailed(f"unknown op {kind!r}")
    return doc
