"""Fixtures for the extender's unit tests: caches built from plain objects, marked synced."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace, Node, ObjectMeta, Pod
from hostaffinity.scheduler_extender.core.cache import SOURCES, ExtenderCache


def _build(
    hosts: Mapping[str, str | None],
    pods: Sequence[Pod] = (),
    *,
    synced: bool = True,
    physical_anti_affinity: PhysicalAntiAffinity = "opt-in",
    **options: Any,
) -> ExtenderCache:
    """Nodes named by `hosts` (value: the placement's host label, None when unknown), the
    `default` namespace, then `pods` in order; `options` go to ExtenderCache as they are."""
    cache = ExtenderCache(physical_anti_affinity=physical_anti_affinity, **options)
    cache.upsert_namespace(Namespace(metadata=ObjectMeta(name="default")))
    for name, host in hosts.items():
        cache.upsert_node(Node(metadata=ObjectMeta(name=name)))
        cache.set_placement(name, host)
    for pod in pods:
        cache.upsert_pod(pod)
    if synced:
        for source in SOURCES:
            cache.add_sync_check(source, lambda: True)
    return cache


@pytest.fixture
def make_cache() -> Callable[..., ExtenderCache]:
    """`make_cache(hosts, pods=(), synced=True, physical_anti_affinity="opt-in")`."""
    return _build
