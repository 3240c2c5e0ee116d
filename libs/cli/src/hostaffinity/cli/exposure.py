"""`hostaffinity exposure`: workloads one ESXi host failure would hit more than once, worst first.

The computation is the affinity library's (exposure.py), the same the scheduler-extender's gauge
counts; this module picks the replicas (namespace, grouping), marks DRS coverage, and renders.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hostaffinity.affinity.exposure import by_labels, by_owner, exposed_workloads, replica_groups
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.workloads import WorkloadRef
from hostaffinity.cli.snapshot import ClusterSnapshot
from hostaffinity.cli.tables import table
from hostaffinity.schema.reports import ExposedWorkload, ExposureReport


def exposure_report(
    snapshot: ClusterSnapshot,
    index: ClusterIndex,
    *,
    namespace: str | None = None,
    min_replicas: int = 2,
    label_keys: Sequence[str] = (),
) -> ExposureReport:
    """Exposed workloads in `namespace` (all when None), grouped by owner or by `label_keys`."""
    records = (r for r in index.pods() if namespace is None or r.namespace == namespace)
    key = by_labels(label_keys) if label_keys else by_owner(snapshot.vmi_owners)
    groups = replica_groups(records, key)
    found = [
        msgspec.structs.replace(
            exposed,
            drs_rule=any(r.key in snapshot.drs_pods for r in groups[workload]),
        )
        for exposed in exposed_workloads(index, groups, min_replicas)
        for workload in [WorkloadRef(exposed.kind, exposed.namespace, exposed.name)]
    ]
    return ExposureReport(min_replicas=min_replicas, workloads=found)


def _share(workload: ExposedWorkload) -> str:
    return f"{workload.on_worst_host}/{workload.replicas} ({workload.share:.0%})"


def render_exposure(report: ExposureReport) -> str:
    header = [
        "KIND",
        "NAMESPACE",
        "NAME",
        "REPLICAS",
        "HOSTS",
        "WORST HOST",
        "ONE HOST TAKES",
        "RULE",
        "SPREAD",
        "DRS RULE",
    ]
    rows = [
        [
            w.kind,
            w.namespace,
            w.name,
            str(w.replicas) + (f" ({w.unplaced} unplaced)" if w.unplaced else ""),
            str(w.hosts),
            w.worst_host,
            _share(w),
            w.coverage,
            w.spread + (" (violated)" if w.spread_violated else ""),
            "yes" if w.drs_rule else "no",
        ]
        for w in report.workloads
    ]
    count = len(report.workloads)
    summary = (
        f"{count} workload{'s' if count != 1 else ''} with replicas sharing an ESXi host "
        f"(min replicas {report.min_replicas})"
    )
    # Sharing a host is a violation where a required host anti-affinity selects every replica.
    broken = [
        (sum(w.coverage == "required" for w in report.workloads), "required host anti-affinity"),
        (sum(w.spread_violated for w in report.workloads), "host topology spread"),
    ]
    said = [f"{n} violate{'s' if n == 1 else ''} their {what}" for n, what in broken if n]
    if said:
        summary += "; " + ", ".join(said)
    return f"{table(header, rows)}\n\n{summary}" if rows else summary
