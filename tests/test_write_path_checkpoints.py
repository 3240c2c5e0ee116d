"""Every await of the four write paths is one the kill-at-every-step tests know
(tests/e2e/test_kill_at_every_step.py): each awaited call of a path's functions is listed here
with the checkpoint that follows it (or why none is needed), so a new await without a checkpoint
fails here, and so does a listed one that went away or a checkpoint the code never names."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from hostaffinity.descheduler.executor import EVICTION_PATH, MIGRATION_PATH, Executor
from hostaffinity.descheduler.intents import Intents
from hostaffinity.descheduler.reporting import Reporter
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.apply_steps import DRS_APPLY_PATH
from hostaffinity.node_labeller.labeller import LABEL_PATH, Labeller
from hostaffinity.runtime.process.checkpoints import WritePath

# Awaits that write nothing, or only what the kill tests do not count, and why.
READ = "a read: nothing to lose"
INNER = "the awaited method has its own checkpoints, listed here too"
UNWIND = "a stop waiting for the attempt in flight, which has its own checkpoints"
NOT_COUNTED = "a Kubernetes Event: a series counting repeats, not exactly-once"

DESCHEDULER: dict[Callable[..., Any], dict[str, str]] = {
    Executor._carry_out: {
        "self._intend": "intent-stored",
        "self._report": "planned",  # intent not stored: a metric only, nothing called
        "asyncio.shield": UNWIND,
        "asyncio.wait": UNWIND,
    },
    Executor._attempt: {
        "self._migrate": "called",
        "self._evict": "called",
        "self._report": INNER,
    },
    Executor._evict: {"self._client.request": "called"},
    Executor._migrate: {"self._client.request": "called"},
    Reporter.intend: {"self._intents.store": INNER},
    Intents.store: {"self._publish": "intent-stored"},
    Reporter.action: {"self._events.record": "reported"},
}
AWAITS: dict[WritePath, dict[Callable[..., Any], dict[str, str]]] = {
    EVICTION_PATH: DESCHEDULER,
    MIGRATION_PATH: DESCHEDULER,
    DRS_APPLY_PATH: {
        DrsApplier.apply: {
            "self._read": READ,
            "self._announce_recovered": INNER,
            "self._batch": INNER,
            "self._records.put": "record-confirmed",
            "self._records.delete": "record-confirmed",
        },
        DrsApplier._batch: {
            "self._record_intent": INNER,
            "self._config.reconfigure": "reconfigured",
            "self._isolate": INNER,
            "self._done": INNER,
        },
        DrsApplier._record_intent: {"self._records.put": "intent-recorded"},
        DrsApplier._announce_recovered: {"self._kept.keep": "announcement-kept"},
        DrsApplier._done: {
            "self._kept.keep": "announcement-kept",
            "self._records.delete": "record-confirmed",
            "self._records.put": "record-confirmed",
        },
        DrsApplier._isolate: {
            "self._read": READ,
            "self._done": INNER,
            "self._config.reconfigure": "reconfigured",
            "self._restore": "intent-recorded",
        },
        KeptAnnouncements.keep: {"self._kv.put": "announcement-kept"},
        KeptAnnouncements.forget: {"self._kv.put": "published", "self._kv.delete": "published"},
    },
    LABEL_PATH: {
        Labeller._apply: {
            "self._store.keep_unpublished": "events-kept",
            "self._write_placement": INNER,
            "self._patch": "labels-patched",
            "self._publish": "event-published",
            "self._store.forget_unpublished": "events-forgotten",
            "self._report": NOT_COUNTED,
        },
        Labeller._write_placement: {
            "self._store.put_node": "kv-written",
            "self._store.delete_node": "kv-written",
        },
        Labeller._patch: {"self._kube.request": "labels-patched"},
    },
}


def _tree(function: Callable[..., Any]) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def awaited_calls(function: Callable[..., Any]) -> set[str]:
    """What the function awaits, by the awaited call's callee as written."""
    return {
        ast.unparse(node.value.func)
        for node in ast.walk(_tree(function))
        if isinstance(node, ast.Await) and isinstance(node.value, ast.Call)
    }


def checkpoints_named(function: Callable[..., Any]) -> set[str]:
    """The steps the function marks with `<path>.checkpoint("<step>")`."""
    return {
        node.args[0].value
        for node in ast.walk(_tree(function))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "checkpoint"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize("path", list(AWAITS), ids=lambda p: p.name)
def test_every_await_of_a_write_path_is_known_with_its_checkpoint(path: WritePath) -> None:
    functions = AWAITS[path]
    for function, listed in functions.items():
        assert awaited_calls(function) == set(listed), function.__qualname__
        for why in listed.values():
            assert why in path.steps or why in (READ, INNER, UNWIND, NOT_COUNTED), why
    named = set().union(*(checkpoints_named(f) for f in functions))
    assert set(path.steps) <= named, f"steps no function marks: {set(path.steps) - named}"


def test_a_new_await_is_caught() -> None:
    """The check sees an await it was not told of."""

    async def with_a_new_write(self: Any) -> None:
        await self._store.put_node(None)
        await self._store.put_host(None)

    assert awaited_calls(with_a_new_write) == {"self._store.put_node", "self._store.put_host"}
