"""The extender's instruments: latency per verb, decisions by outcome, cache age per source.

Recorded through OpenTelemetry; the runtime's Prometheus exporter serves them on /metrics as
`hostaffinity_extender_request_duration_seconds`, `hostaffinity_extender_decisions_total`,
`hostaffinity_extender_cache_age_seconds` and `hostaffinity_extender_decision_events_dropped_total`,
and `hostaffinity_workloads_exposed{namespace}` (exposure_gauge.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from hostaffinity.scheduler_extender.cache import ExtenderCache
from hostaffinity.scheduler_extender.exposure_gauge import ExposureGauge

# kube-scheduler waits httpTimeout (5 s by default); answers should take well under 10 ms.
LATENCY_BUCKETS_SECONDS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class ExtenderMetrics:
    """Instruments created once per process, from the global meter provider."""

    def __init__(self, cache: ExtenderCache) -> None:
        meter = metrics.get_meter("hostaffinity.scheduler_extender")
        self._cache = cache
        self._latency = meter.create_histogram(
            "hostaffinity_extender_request_duration",
            unit="s",
            description="Time to answer kube-scheduler, per verb",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_SECONDS,
        )
        self._decisions = meter.create_counter(
            "hostaffinity_extender_decisions",
            description="Answers given, per verb and outcome",
        )
        self._dropped = meter.create_counter(
            "hostaffinity_extender_decision_events_dropped",
            description="Sampled decisions not published (queue full or bus unavailable)",
        )
        meter.create_observable_gauge(
            "hostaffinity_extender_cache_age",
            callbacks=[self._ages],
            unit="s",
            description="Seconds since each cache source last changed",
        )
        self._exposure = ExposureGauge(cache)
        meter.create_observable_gauge(
            "hostaffinity_workloads_exposed",
            callbacks=[self._exposed],
            description="Workloads with two or more replicas on one ESXi host, per namespace",
        )

    def answered(self, verb: str, outcome: str, seconds: float) -> None:
        """One request answered."""
        self._latency.record(seconds, {"verb": verb})
        self._decisions.add(1, {"verb": verb, "outcome": outcome})

    def dropped_event(self) -> None:
        self._dropped.add(1)

    def _ages(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(age, {"source": s}) for s, age in self._cache.ages().items()]

    def _exposed(self, _options: CallbackOptions) -> Iterable[Observation]:
        counts = self._exposure.counts().items()
        return [Observation(count, {"namespace": ns}) for ns, count in counts]
