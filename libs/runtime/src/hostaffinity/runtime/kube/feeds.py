"""A service's informers as a table: one row per resource, saying what handles its events and
how its objects decode, so what a service watches reads at a glance and the informers are built
one way everywhere (the rows of the descheduler's, the scheduler-extender's and the
drs-translator's feeds).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hostaffinity.runtime.kube.client import KubeClient, ResourceRef
from hostaffinity.runtime.kube.informer import Informer, InformerEvent, InformerSettings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Feed(Generic[T]):
    """One row: the resource listed and watched, its events' handler and its objects' decoder."""

    resource: ResourceRef
    handler: Callable[[InformerEvent[T]], Awaitable[None]]
    decoder: Callable[[bytes], T]


def informers(
    client: KubeClient, feeds: Iterable[Feed[Any]], settings: InformerSettings | None = None
) -> list[Informer[Any]]:
    """One informer per row, in the table's order, all with the same paging and pacing."""
    return [
        Informer(client, feed.resource, feed.handler, feed.decoder, settings=settings)
        for feed in feeds
    ]
