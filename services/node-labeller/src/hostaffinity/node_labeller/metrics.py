"""The node-labeller's instruments, served on /metrics by the runtime's Prometheus exporter as
`hostaffinity_labeller_label_patches_total`, `hostaffinity_labeller_node_warnings_total{reason}`,
`hostaffinity_labeller_kv_repairs_total`, `hostaffinity_labeller_update_to_patch_seconds` and
`hostaffinity_labeller_nodes{state}`, the vCenter watch's
`hostaffinity_labeller_vcenter_reconnects_total{vcenter}` and the tag reads'
`hostaffinity_labeller_tag_reads_total{vcenter,outcome}` and
`hostaffinity_labeller_tag_entries_skipped_total{vcenter}`; events not yet published are the
runtime outbox's `hostaffinity_bus_outbox_*{outbox="node-labeller"}`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from hostaffinity.runtime.process.observed import observe_latest
from hostaffinity.runtime.process.telemetry import seconds_histogram

METER: Final = "hostaffinity.node_labeller"

# A vMotion is labelled in ~0.1 s on vcsim (bench/node_labeller_bench.py); a minute is an outage.
UPDATE_TO_PATCH_BUCKETS_SECONDS: Final = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip

NodeStates = Callable[[], Iterable[Observation]]


class LabellerMetrics:
    """The labeller's instruments, built by the service's wiring and handed to the labeller
    (the counters are the process's, from the global meter provider); the nodes gauge reports
    the instance built last (runtime process/observed.py), once `count_nodes` says where to
    read."""

    def __init__(self) -> None:
        meter = metrics.get_meter(METER)
        self.node_states: NodeStates = list
        self._patches = meter.create_counter(
            "hostaffinity_labeller_label_patches", description="Label patches sent"
        )
        self._warnings = meter.create_counter(
            "hostaffinity_labeller_node_warnings",
            description="Problems reported on nodes, by reason",
        )
        self._repairs = meter.create_counter(
            "hostaffinity_labeller_kv_repairs",
            description="Topology keys a resync found not holding what was written, rewritten",
        )
        self._patch_latency = seconds_histogram(
            meter,
            "hostaffinity_labeller_update_to_patch",
            "From a vCenter update arriving to its label patch being answered",
            UPDATE_TO_PATCH_BUCKETS_SECONDS,
        )
        observe_latest(
            METER,
            "hostaffinity_labeller_nodes",
            lambda: self.node_states(),
            description="Nodes by state: placed (labelled with their host), unmatched (no VM "
            "matches), pending (not placed yet, or on a host the inventory does not know)",
        )

    def count_nodes(self, node_states: NodeStates) -> None:
        """Where the nodes gauge reads (the labeller's nodes)."""
        self.node_states = node_states

    def patched(self, update_to_patch_seconds: float | None) -> None:
        """A label patch answered; with the time since its vCenter update when that is known."""
        self._patches.add(1)
        if update_to_patch_seconds is not None:
            self._patch_latency.record(update_to_patch_seconds)

    def warned(self, reason: str) -> None:
        self._warnings.add(1, {"reason": reason})

    def repaired(self) -> None:
        self._repairs.add(1)


class WatchMetrics:
    """The vCenter watch's instrument (the watch starts before the labeller exists)."""

    def __init__(self) -> None:
        self._reconnects = metrics.get_meter(METER).create_counter(
            "hostaffinity_labeller_vcenter_reconnects",
            description="vCenter watch sessions lost and logged in again (each is followed by "
            "a resync), by vCenter",
        )

    def reconnected(self, vcenter: str) -> None:
        self._reconnects.add(1, {"vcenter": vcenter})


class TagReadMetrics:
    """The tag reads' instrument (failure domains; apart from the inventory watch)."""

    def __init__(self) -> None:
        meter = metrics.get_meter(METER)
        self._reads = meter.create_counter(
            "hostaffinity_labeller_tag_reads",
            description="Reads of vCenter's tags for failure domains, by vCenter and outcome "
            "(ok, failed)",
        )
        self._skipped = meter.create_counter(
            "hostaffinity_labeller_tag_entries_skipped",
            description="Entries of vCenter's tag answers that did not decode and were left out "
            "(the rest applied), each counted once when it first appears, by vCenter",
        )

    def read(self, vcenter: str, *, ok: bool) -> None:
        self._reads.add(1, {"vcenter": vcenter, "outcome": "ok" if ok else "failed"})

    def skipped(self, vcenter: str, count: int) -> None:
        self._skipped.add(count, {"vcenter": vcenter})
