"""The extender's instruments: latency per verb, decisions by outcome, cache age per source.

Recorded through OpenTelemetry; the runtime's Prometheus exporter serves them on /metrics as
`hostaffinity_extender_request_duration_seconds`, `hostaffinity_extender_decisions_total`,
`hostaffinity_extender_cache_age_seconds`,
`hostaffinity_extender_requests_refused_total{path,status}` (every 4xx/5xx, whatever refused it),
`hostaffinity_extender_inflight_wait_seconds` (a filter waiting for an in-flight pod's placement),
`hostaffinity_extender_inflight_pods`, `hostaffinity_extender_inflight_dropped_total{why}`
(`evicted` for room, `expired` when the placement never came),
`hostaffinity_extender_source_stale_seconds{source}` (how long a source has not been live: the
window in which the extender answers `Error` rather than guess),
and `hostaffinity_extender_informer_lag{source}` (events received, not yet in the cache).
Sampled decisions not published are the runtime's
`hostaffinity_bus_outbox_dropped_total{outbox="scheduler-extender"}`. The exposure gauge,
`hostaffinity_workloads_exposed`, is the descheduler's: it runs in every install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from hostaffinity.runtime.process.observed import observe_latest
from hostaffinity.runtime.process.telemetry import seconds_histogram
from hostaffinity.scheduler_extender.core.cache import ExtenderCache

METER: Final = "hostaffinity.scheduler_extender"
# kube-scheduler waits httpTimeout (5 s by default); answers should take well under 10 ms.
LATENCY_BUCKETS_SECONDS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class ExtenderMetrics:
    """The extender's instruments, built by its wiring and handed to the server (the counters
    are the process's, from the global meter provider); the gauges report the instance built
    last (runtime process/observed.py): a restart in the same process, as in tests, reports
    the new extender's cache."""

    def __init__(
        self,
        cache: ExtenderCache,
        *,
        stale: Callable[[], Mapping[str, float]] = dict,
        lag: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        meter = metrics.get_meter(METER)
        self._cache = cache
        self._stale = stale
        self._lag = lag
        self._refused = meter.create_counter(
            "hostaffinity_extender_requests_refused",
            description="Requests answered with HTTP 4xx/5xx, by path and status",
        )
        self._wait = seconds_histogram(
            meter,
            "hostaffinity_extender_inflight_wait",
            "Time a filter waited for in-flight pods' placements",
            LATENCY_BUCKETS_SECONDS,
        )
        observe_latest(
            METER,
            "hostaffinity_extender_inflight_pods",
            lambda: [Observation(len(self._cache.in_flight))],
            description="Pods filtered and not yet reported bound",
        )
        observe_latest(
            METER,
            "hostaffinity_extender_inflight_dropped",
            self._inflight_dropped,
            description="In-flight pods dropped: evicted for room, or expired without placement",
            kind="counter",
        )
        observe_latest(
            METER,
            "hostaffinity_extender_source_stale",
            lambda: self._per_source(self._stale()),
            unit="s",
            description="Seconds since a source stopped being live (0 while live)",
        )
        observe_latest(
            METER,
            "hostaffinity_extender_informer_lag",
            lambda: self._per_source(self._lag()),
            unit="{event}",
            description="Informer events received and not yet applied to the cache",
        )
        self._latency = seconds_histogram(
            meter,
            "hostaffinity_extender_request_duration",
            "Time to answer kube-scheduler, per verb",
            LATENCY_BUCKETS_SECONDS,
        )
        self._decisions = meter.create_counter(
            "hostaffinity_extender_decisions",
            description="Answers given, per verb and outcome",
        )
        observe_latest(
            METER,
            "hostaffinity_extender_cache_age",
            self._ages,
            unit="s",
            description="Seconds since each cache source last changed",
        )

    def answered(self, verb: str, outcome: str, seconds: float) -> None:
        """One request answered."""
        self._latency.record(seconds, {"verb": verb})
        self._decisions.add(1, {"verb": verb, "outcome": outcome})

    def refused(self, path: str, status: int) -> None:
        """A request answered with an HTTP error, by whatever refused it."""
        self._refused.add(1, {"path": path, "status": str(status)})

    def waited(self, seconds: float, late: int) -> None:
        """A filter waited for in-flight placements; `late` of them never came in time."""
        self._wait.record(seconds, {"late": str(late > 0).lower()})

    def _inflight_dropped(self) -> Iterable[Observation]:
        in_flight = self._cache.in_flight
        return [
            Observation(in_flight.evicted, {"why": "evicted"}),
            Observation(in_flight.expired, {"why": "expired"}),
        ]

    @staticmethod
    def _per_source(values: Mapping[str, float]) -> Iterable[Observation]:
        return [Observation(value, {"source": source}) for source, value in values.items()]

    def _ages(self) -> Iterable[Observation]:
        return [Observation(age, {"source": s}) for s, age in self._cache.ages().items()]
