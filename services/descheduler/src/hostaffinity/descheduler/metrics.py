"""The descheduler's instruments, served on /metrics by the runtime's Prometheus exporter as
`hostaffinity_descheduler_pods_evicted_total{strategy,result}`,
`hostaffinity_descheduler_cycle_duration_seconds`,
`hostaffinity_descheduler_migrations_finished_total{result}`,
`hostaffinity_descheduler_vms_awaiting_restart` (for restart_required.py) and
`hostaffinity_workloads_exposed{namespace}` (exposure_gauge.py); bus events dropped
while NATS was away are the runtime outbox's
`hostaffinity_bus_outbox_dropped_total{outbox="descheduler"}`.

`result` is evicted, migrated, dry-run, blocked (a PodDisruptionBudget said 429, retried later),
unreachable (the API server could not be reached, retried later), gone (the pod was already
deleted), error or not-migratable (a VMI that should move cannot live-migrate). Every strategy
of the policy is served with every result at 0 from the start, so the alerts' increase() sees
the first attempt; which pods and namespaces are in the pod.evicted events and the pods'
Kubernetes Events (a namespace label could not be served at 0 ahead of time).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from opentelemetry import metrics

from hostaffinity.descheduler.executor import ATTEMPT_RESULTS
from hostaffinity.runtime.process.telemetry import seconds_histogram

# The meter of every descheduler instrument, the gauges of exposure_gauge.py and
# restart_required.py included.
METER: Final = "hostaffinity.descheduler"
CYCLE_BUCKETS_SECONDS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class DeschedulerMetrics:
    """Instruments created once per process, from the global meter provider."""

    def __init__(self, strategies: Iterable[str] = ()) -> None:
        meter = metrics.get_meter(METER)
        self._evicted = meter.create_counter(
            "hostaffinity_descheduler_pods_evicted",
            description="Eviction and migration attempts, per strategy and result",
        )
        for strategy in strategies:
            for result in ATTEMPT_RESULTS:
                self._evicted.add(0, {"strategy": strategy, "result": result})
        self._cycle = seconds_histogram(
            meter,
            "hostaffinity_descheduler_cycle_duration",
            "Time one decision cycle took over the cache",
            CYCLE_BUCKETS_SECONDS,
        )
        self._migrations = meter.create_counter(
            "hostaffinity_descheduler_migrations_finished",
            description="VirtualMachineInstanceMigrations this descheduler created that finished",
        )

    def attempted(self, strategy: str, result: str) -> None:
        self._evicted.add(1, {"strategy": strategy, "result": result})

    def cycle(self, seconds: float) -> None:
        self._cycle.record(seconds)

    def migration_finished(self, result: str) -> None:
        self._migrations.add(1, {"result": result})
