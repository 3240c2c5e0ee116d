"""Bad request bodies, by class, as a hostile or broken client would send them: the corpus every
HTTP entry point is fuzzed with (tests/integration/test_http_fuzz.py, and the campaign).

Each body is derived from a valid one, so the decoder gets past the first byte: not JSON, invalid
UTF-8 (raw and inside a string), every value of the valid body replaced by each other JSON type,
deep nesting, a huge body, an empty one, and the caller's own variants (a review without a uid,
other kinds and operations).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any, Final

# A JSON value of each type; a field replaced by each of those it is not.
OTHER_TYPES: Final[tuple[Any, ...]] = (None, True, 7, -1.5, "x", [], {}, [1, "a"], {"k": []})
DEPTH: Final = 100_000
HUGE_BYTES: Final = 16 * 1024 * 1024


def paths(value: Any, at: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every path to a value in a JSON document, the root last."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*at, index))
    yield at


def replaced(document: Any, path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return value
    changed = copy.deepcopy(document)
    parent = changed
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return changed


def wrong_types(document: Any) -> Iterator[tuple[str, bytes]]:
    """The document with each value, at every level, replaced by each other JSON type."""
    for path in paths(document):
        original = _at(document, path)
        for other in OTHER_TYPES:
            if type(other) is type(original):
                continue
            name = f"wrong type at /{'/'.join(map(str, path))}: {json.dumps(other)}"
            yield name, json.dumps(replaced(document, path, other)).encode()


def _at(document: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def malformed(valid: bytes) -> Iterator[tuple[str, bytes]]:
    """The classes of bad bytes that do not depend on the document's shape."""
    yield "empty body", b""
    yield "not JSON", b"this is not json"
    yield "truncated JSON", valid[: len(valid) // 2]
    yield "invalid UTF-8, raw", b"\xff\xfe\xfd"
    yield "invalid UTF-8 in a string", valid.replace(b'"', b'"\xc3\x28', 1)
    yield "invalid UTF-8 in a key", b'{"\xff": 1}'
    yield "a lone surrogate escape", b'{"a": "\\ud800"}'
    yield "deep arrays", b"[" * DEPTH + b"]" * DEPTH
    yield "deep objects", b'{"a":' * DEPTH + b"1" + b"}" * DEPTH
    yield "huge body", b'{"pad": "' + b"x" * HUGE_BYTES + b'"}'
    yield "a JSON string", b'"hello"'
    yield "a JSON number", b"12345678901234567890123456789"
    yield "null", b"null"
    yield "an array", b"[]"
    yield "NaN", b'{"a": NaN}'
    yield "two documents", valid + valid
