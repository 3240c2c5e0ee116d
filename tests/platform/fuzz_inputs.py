"""Malformed inputs at volume, from a seed: the bad-input classes of bad_input.py first, then as
many random mutations of a valid document as asked for.

A mutation works on the bytes (flip, cut, insert, repeat, truncate) or on the document (a value
at a random path replaced by a random JSON value of any type, a key dropped or renamed, a string
made hostile, a number made huge), so most inputs get past the first byte and into the decoder's
and the handler's deeper paths. The same seed gives the same inputs: a failure names its input
and reproduces.

`FUZZ_INPUTS` in the environment sets the count per entry point; the default keeps CI short
(docs/development.md gives the full run's command).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, Final
from urllib.parse import quote

import msgspec

from tests.platform.bad_input import malformed, paths, replaced, wrong_types

FULL_RUN: Final = 10_000
SEED: Final = 28
# Characters a decoder or a label parser may trip on: controls, quotes, escapes, separators,
# non-BMP, right-to-left, a byte-order mark and the lone surrogate half JSON can escape.
HOSTILE_TEXT: Final = (
    "\x00",
    "\x1f",
    '"',
    "\\",
    "/",
    ".",
    "*",
    ">",
    " ",
    "\u202e",
    "\ufeff",
    "\U0001f600",
    "\\ud800",
    "%ff",
    "..",
)


def fuzz_count(default: int) -> int:
    """Inputs per entry point: `FUZZ_INPUTS` when set, else `default`."""
    return int(os.environ.get("FUZZ_INPUTS", default))


def fuzzed(valid: Any, count: int, seed: int = SEED) -> Iterator[tuple[str, bytes]]:
    """`count` named malformed variants of the JSON document `valid`."""
    encoded = json.dumps(valid).encode()
    # At most half the count from the fixed classes, so random mutations always run too.
    fixed = [*malformed(encoded), *islice(wrong_types(valid), count // 2)][:count]
    yield from fixed
    rng = random.Random(seed)
    locations = list(paths(valid))
    for index in range(count - len(fixed)):
        mutate = rng.choice(MUTATIONS)
        yield f"{mutate.__name__.lstrip('_')} #{index}", mutate(rng, valid, encoded, locations)


Location = tuple[str | int, ...]
Mutation = Callable[[random.Random, Any, bytes, list[Location]], bytes]


def _flip_bytes(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    changed = bytearray(encoded)
    for _ in range(rng.randint(1, 8)):
        changed[rng.randrange(len(changed))] = rng.randrange(256)
    return bytes(changed)


def _cut_span(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    start = rng.randrange(len(encoded))
    return encoded[:start] + encoded[start + rng.randint(1, 64) :]


def _insert_bytes(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    start = rng.randrange(len(encoded) + 1)
    noise = rng.choice((rng.randbytes(rng.randint(1, 32)), b"{", b"[", b'"', b",", b":", b"\\"))
    return encoded[:start] + noise + encoded[start:]


def _repeat_span(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    start = rng.randrange(len(encoded))
    span = encoded[start : start + rng.randint(1, 128)]
    return encoded[:start] + span * rng.randint(2, 50) + encoded[start:]


def _truncate(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    return encoded[: rng.randrange(len(encoded))]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of a random type, nested a little."""
    kinds = ["null", "bool", "int", "float", "text"] + (["list", "object"] if depth < 4 else [])
    match rng.choice(kinds):
        case "null":
            return None
        case "bool":
            return rng.random() < 0.5
        case "int":
            return rng.choice((0, -1, 2**31, 2**63, -(2**63) - 1, 2**70, rng.randint(-9, 9)))
        case "float":
            return rng.choice((0.5, -0.0, 1e308, -1e-308, 3.14))
        case "text":
            return hostile_text(rng)
        case "list":
            return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        case _:
            return {
                hostile_text(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))
            }


def hostile_text(rng: random.Random) -> str:
    parts = [rng.choice(HOSTILE_TEXT) for _ in range(rng.randint(0, 6))]
    return rng.choice(("", "a", "node-1", "x" * rng.randint(1, 300))) + "".join(parts)


def _retype_value(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    return _json(replaced(valid, rng.choice(at), random_value(rng)))


def _hostile_string(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    return _json(replaced(valid, rng.choice(at), hostile_text(rng)))


def _huge_number(rng: random.Random, valid: Any, encoded: bytes, at: list[Location]) -> bytes:
    digits = "9" * rng.randint(20, 5000)
    text = json.dumps(replaced(valid, rng.choice(at), "__number__"))
    return text.replace('"__number__"', rng.choice((digits, f"-{digits}", f"1e{digits}"))).encode()


def _drop_or_rename_key(
    rng: random.Random, valid: Any, encoded: bytes, at: list[Location]
) -> bytes:
    document = json.loads(encoded)
    objects = [path for path in at if isinstance(_at(document, path), dict) and _at(document, path)]
    if not objects:
        return _retype_value(rng, valid, encoded, at)
    target = _at(document, rng.choice(objects))
    key = rng.choice(sorted(target))
    value = target.pop(key)
    if rng.random() < 0.5:
        target[key + rng.choice(HOSTILE_TEXT)] = value
    return _json(document)


def _at(document: Any, path: Location) -> Any:
    for step in path:
        document = document[step]
    return document


def _json(document: Any) -> bytes:
    # msgspec keeps what json.dumps would refuse or mangle (lone surrogates stay escaped text).
    return msgspec.json.encode(document)


MUTATIONS: Final[tuple[Mutation, ...]] = (
    _flip_bytes,
    _cut_span,
    _insert_bytes,
    _repeat_span,
    _truncate,
    _retype_value,
    _hostile_string,
    _huge_number,
    _drop_or_rename_key,
)


METHODS: Final = ("GET", "GET", "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW")


def health_requests(
    path: str, count: int, seed: int = SEED
) -> Iterator[tuple[str, str, str, bytes]]:
    """`count` requests near a health or metrics `path`: any method, a mangled path or query
    (percent-encoded, as it travels), a malformed body. Yields (name, method, target, body)."""
    rng = random.Random(seed)
    bodies = fuzzed({}, count, seed)
    for index, (body_name, body) in enumerate(bodies):
        method = rng.choice(METHODS)
        target = rng.choice(
            (
                path,
                f"{path}/",
                f"{path}//x",
                f"{path}/..%2f..%2fetc",
                f"/%2e%2e{path}",
                f"{path}?{quote(hostile_text(rng))}={quote(hostile_text(rng))}",
                f"{path}?verbose&exclude=" + quote(hostile_text(rng)) * rng.randint(1, 50),
                "/" + quote(hostile_text(rng)),
            )
        )
        yield f"#{index} {method} {target[:80]} with {body_name}", method, target, body
