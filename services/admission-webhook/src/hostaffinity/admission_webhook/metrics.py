"""The webhook's instruments: reviews by outcome and latency, and opted-in pods with no twin.

Served on /metrics as `hostaffinity_webhook_reviews_total` (outcome: patched, unchanged,
warned, refused), `hostaffinity_webhook_review_duration_seconds` and
`hostaffinity_webhook_pods_without_twin` (pods that opted in but were admitted while the
webhook was unreachable: `failurePolicy: Ignore` lets them through silently otherwise).
Sampled `pod.mutated` events not published are the runtime's
`hostaffinity_bus_outbox_dropped_total{outbox="admission-webhook"}`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from hostaffinity.admission_webhook.core.mutation import Outcome
from hostaffinity.runtime.process.telemetry import seconds_histogram

# The API server waits timeoutSeconds (2 s as shipped); a review should take well under 1 ms.
LATENCY_BUCKETS_SECONDS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 2.0,
)  # fmt: skip


class AdmissionMetrics:
    """Instruments created once per process, from the global meter provider."""

    def __init__(self, twinless: Callable[[], int] = lambda: 0) -> None:
        meter = metrics.get_meter("hostaffinity.admission_webhook")
        self._twinless = twinless
        self._reviews = meter.create_counter(
            "hostaffinity_webhook_reviews", description="Admission reviews answered, by outcome"
        )
        self._latency = seconds_histogram(
            meter,
            "hostaffinity_webhook_review_duration",
            "Time to answer an admission review",
            LATENCY_BUCKETS_SECONDS,
        )
        meter.create_observable_gauge(
            "hostaffinity_webhook_pods_without_twin",
            callbacks=[self._observe_twinless],
            description="Opted-in pods that carry no host-key twin (admitted without the webhook)",
        )

    def reviewed(self, outcome: Outcome, seconds: float) -> None:
        self._reviews.add(1, {"outcome": outcome.value})
        self._latency.record(seconds)

    def _observe_twinless(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._twinless())]
