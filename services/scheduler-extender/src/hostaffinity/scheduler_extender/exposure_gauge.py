"""`hostaffinity_workloads_exposed{namespace}`: the `hostaffinity exposure` figure, for alerting.

Counted from the cache's index by the affinity library's exposure module, the one the CLI uses.
A count walks every assigned pod (~0.15 s at 150,000 pods, bench/cli_bench.py) on the event
loop the decisions share, so it is refreshed at most every `refresh_seconds` whatever the scrape
interval. A namespace
that had exposed workloads reports 0 once it has none, so an alert on it resolves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

from hostaffinity.affinity.exposure import exposed_per_namespace
from hostaffinity.scheduler_extender.cache import ExtenderCache

REFRESH_SECONDS: Final = 30.0


class ExposureGauge:
    """Exposed workloads per namespace, recounted when older than `refresh_seconds`."""

    def __init__(
        self,
        cache: ExtenderCache,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cache = cache
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._counted_at: float | None = None
        self._counts: dict[str, int] = {}

    def counts(self) -> Mapping[str, int]:
        """Per namespace; nothing until the cache holds the whole cluster."""
        if self._cache.not_synced():
            return {}
        now = self._clock()
        if self._counted_at is None or now - self._counted_at >= self._refresh_seconds:
            fresh = exposed_per_namespace(self._cache.index)
            self._counts = {**dict.fromkeys(self._counts, 0), **fresh}
            self._counted_at = now
        return self._counts
