"""The drs-translator's instruments, served on /metrics by the runtime's Prometheus exporter.

`hostaffinity_drs_conflicts_total{reason}`, `hostaffinity_drs_drift_total{change}`,
`hostaffinity_drs_reconfigures_total{outcome}`, `hostaffinity_drs_maintenance_holds_total{change}`
(rules held for a host's maintenance, and restored), `hostaffinity_drs_rules_held{vcenter}` (held
now, read from the ownership records, so it survives a restart where the counters start at 0),
`hostaffinity_drs_unprotected_groups{vcenter,reason}` (rules and groups wanted that vCenter does
not hold now), `hostaffinity_drs_shared_hosts_warnings{vcenter,risk}` (other installs' rules that
keep a host from maintenance or leave no failover room now), both from the cluster reports, and
`hostaffinity_drs_plan_duration_seconds`.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Final, get_args

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from hostaffinity.drs_translator.core.diff import DriftChange
from hostaffinity.drs_translator.core.rules import ConflictReason
from hostaffinity.runtime.process.observed import observe_latest
from hostaffinity.runtime.process.telemetry import seconds_histogram
from hostaffinity.schema import DrsClusterReport
from hostaffinity.schema.drs import SharedHostsRisk

METER: Final = "hostaffinity.drs_translator"
# Planning every cluster is a pure computation over the caches: milliseconds, seconds at worst.
RECONFIGURE_OUTCOMES: Final = ("applied", "refused")
HOLD_CHANGES: Final = ("held", "restored")
PLAN_BUCKETS_SECONDS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Per vCenter (by name), how many rules of ours are held for a host's maintenance now.
HeldRules = Callable[[], Mapping[str, int]]
# The reasons a wanted rule or group is not in vCenter (UnprotectedGroup.reason).
UNPROTECTED_REASONS: Final = (*get_args(ConflictReason), "not-yet")
# Every vSphere cluster's report now.
Reports = Callable[[], Iterable[DrsClusterReport]]


class DrsMetrics:
    """The translator's instruments, built by its wiring and handed to the parts that record
    (the counters are the process's, from the global meter provider); the gauges report the
    instance built last (runtime process/observed.py), once `count_held` and `count_reports`
    say where to read."""

    def __init__(self) -> None:
        meter = metrics.get_meter(METER)
        self.held: HeldRules = dict
        self.reports: Reports = list
        self.vcenters: list[str] = []
        observe_latest(
            METER,
            "hostaffinity_drs_unprotected_groups",
            self._observe_unprotected,
            description="DRS rules and groups this install wants that vCenter does not hold now",
        )
        observe_latest(
            METER,
            "hostaffinity_drs_shared_hosts_warnings",
            self._observe_shared_hosts,
            description="Other installs' rules on the same hosts that keep a host from "
            "maintenance or leave no failover room now",
        )
        observe_latest(
            METER,
            "hostaffinity_drs_rules_held",
            self._observe_held,
            description="Rules of ours disabled now so that hosts can enter maintenance mode",
        )
        self.conflicts = meter.create_counter(
            "hostaffinity_drs_conflicts",
            description="Rules not sent (or not ours to touch), per reason",
        )
        self.drift = meter.create_counter(
            "hostaffinity_drs_drift", description="Rules of ours changed outside hostaffinity"
        )
        self.reconfigures = meter.create_counter(
            "hostaffinity_drs_reconfigures",
            description="ReconfigureComputeResource_Task calls, per outcome",
        )
        self.holds = meter.create_counter(
            "hostaffinity_drs_maintenance_holds",
            description="Rules disabled so that a host could enter maintenance, and restored",
        )
        self.plan_duration = seconds_histogram(
            meter,
            "hostaffinity_drs_plan_duration",
            "Time to plan every cluster",
            PLAN_BUCKETS_SECONDS,
        )
        # Every series served at 0 from the start: the alerts' increase() sees the first one.
        for reason in get_args(ConflictReason):
            self.conflicts.add(0, {"reason": reason})
        for change in get_args(DriftChange):
            self.drift.add(0, {"change": change})
        for outcome in RECONFIGURE_OUTCOMES:
            self.reconfigures.add(0, {"outcome": outcome})
        for change in HOLD_CHANGES:
            self.holds.add(0, {"change": change})

    def count_held(self, held: HeldRules) -> None:
        """Where the held-rules gauge reads (the ownership records, once loaded)."""
        self.held = held

    def count_reports(self, reports: Reports, vcenters: Iterable[str]) -> None:
        """Where the unprotected-groups and shared-hosts gauges read (the cluster reports), and
        the vCenters they report on."""
        self.reports = reports
        self.vcenters = list(vcenters)

    def _observe_held(self) -> Iterable[Observation]:
        return [Observation(count, {"vcenter": name}) for name, count in self.held().items()]

    def _observe_unprotected(self) -> Iterable[Observation]:
        """Every (vCenter, reason) served, at 0 when none: an alert's series exists from the
        start."""
        return self._per_vcenter(
            "reason",
            UNPROTECTED_REASONS,
            lambda report: (group.reason for group in report.unprotected),
        )

    def _observe_shared_hosts(self) -> Iterable[Observation]:
        return self._per_vcenter(
            "risk",
            get_args(SharedHostsRisk),
            lambda report: (warning.risk for warning in report.shared_hosts),
        )

    def _per_vcenter(
        self, label: str, values: Iterable[str], of: Callable[[DrsClusterReport], Iterable[str]]
    ) -> list[Observation]:
        """How many of each value the reports name, per vCenter (0 included)."""
        counts = Counter(
            (report.vcenter, value) for report in self.reports() for value in of(report)
        )
        return [
            Observation(counts[(vc, value)], {"vcenter": vc, label: value})
            for vc in self.vcenters
            for value in values
        ]
