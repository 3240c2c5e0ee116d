"""Exposure: workloads whose replicas share an ESXi host, so one host failure takes several.

Read from the engine's index, so the host of a replica is the engine's host domain (the topology
KV's placement first, then the node's host label) and a rule's coverage is read from the pods'
compiled terms and topology spreads (the physical reading of hostname rules included). A host
spread is violated when its fullest ESXi host holds more than maxSkew matching pods beyond its
emptiest one, every host with a node counted (the node inclusion policies, which depend on the
pod being scheduled, are not applied). The `hostaffinity
exposure` command and the descheduler's `hostaffinity_workloads_exposed` gauge both call
this module, so they count the same workloads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from hostaffinity.affinity.index import ClusterIndex, PodRecord
from hostaffinity.affinity.interpod import AffinityTerm, NamespaceScope
from hostaffinity.affinity.topology_spread import SpreadConstraint
from hostaffinity.affinity.workloads import WorkloadRef
from hostaffinity.schema.names import LABEL_ESXI_HOST
from hostaffinity.schema.reports import Coverage, ExposedWorkload

DEFAULT_MIN_REPLICAS: Final = 2
LABEL_SET: Final = "LabelSet"

GroupKey = Callable[[PodRecord], WorkloadRef | None]


def by_owner(vmi_owners: Mapping[tuple[str, str], WorkloadRef] | None = None) -> GroupKey:
    """Group replicas by controller (Deployment, StatefulSet, ...); launcher pods by the VMI's
    owner when `vmi_owners` names it."""
    owners = vmi_owners or {}

    def key(record: PodRecord) -> WorkloadRef | None:
        workload = record.workload
        if workload is not None and owners and workload.kind == "VirtualMachineInstance":
            return owners.get((workload.namespace, workload.name), workload)
        return workload

    return key


def by_labels(keys: Sequence[str]) -> GroupKey:
    """Group by the values of these label keys (per namespace); pods lacking one are left out."""

    def key(record: PodRecord) -> WorkloadRef | None:
        labels = record.labels
        if not all(k in labels for k in keys):
            return None
        return WorkloadRef(LABEL_SET, record.namespace, ",".join(f"{k}={labels[k]}" for k in keys))

    return key


def replica_groups(
    records: Iterable[PodRecord], key: GroupKey
) -> dict[WorkloadRef, list[PodRecord]]:
    """Assigned replicas per workload."""
    groups: dict[WorkloadRef, list[PodRecord]] = {}
    for record in records:
        workload = key(record)
        if workload is not None:
            groups.setdefault(workload, []).append(record)
    return groups


def _host_counts(index: ClusterIndex, replicas: Sequence[PodRecord]) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    unplaced = 0
    for record in replicas:
        host = index.domain(record.node, LABEL_ESXI_HOST)
        if host is None:
            unplaced += 1
        else:
            counts[host] += 1
    return counts, unplaced


def _selects_all(term: AffinityTerm, replicas: Sequence[PodRecord], index: ClusterIndex) -> bool:
    namespaces = index.namespaces
    return term.physical and all(
        term.matches(r.namespace, r.labels, namespaces.get(r.namespace, {})) for r in replicas
    )


def host_coverage(index: ClusterIndex, replicas: Sequence[PodRecord]) -> Coverage:
    """The strongest host-level anti-affinity among the replicas' terms that selects them all."""
    preferred = False
    for record in replicas:
        terms = record.terms
        if any(_selects_all(t, replicas, index) for t in terms.required_anti):
            return "required"
        preferred = preferred or any(_selects_all(t, replicas, index) for t in terms.preferred_anti)
    return "preferred" if preferred else "none"


def host_spread(replicas: Sequence[PodRecord]) -> SpreadConstraint | None:
    """The strongest spread over ESXi hosts among the replicas' that selects them all
    (DoNotSchedule before ScheduleAnyway)."""
    found: SpreadConstraint | None = None
    for record in replicas:
        for spread in record.spreads:
            if spread.physical and all(spread.selector.matches(r.labels) for r in replicas):
                if spread.hard:
                    return spread
                found = found or (spread if spread.soft else None)
    return found


def spread_violated(index: ClusterIndex, namespace: str, spread: SpreadConstraint) -> bool:
    """Whether the pods the spread matches in `namespace` sit more than maxSkew apart between
    the fullest and the emptiest ESXi host."""
    if not spread.selector.requirements:
        return False
    key = spread.topology_key
    counts: Counter[str] = Counter()
    scope = NamespaceScope(everywhere=False, names=frozenset((namespace,)))
    for record in index.matching_pods(scope, spread.selector):
        host = index.domain(record.node, key)
        if host is not None and not record.terminating:
            counts[host] += 1
    if not counts:
        return False
    lowest = 0 if len(counts) < len(index.domains(key)) else min(counts.values())
    return max(counts.values()) - lowest > spread.max_skew


def exposed_workloads(
    index: ClusterIndex,
    groups: Mapping[WorkloadRef, Sequence[PodRecord]],
    min_replicas: int = DEFAULT_MIN_REPLICAS,
) -> list[ExposedWorkload]:
    """Workloads with at least `min_replicas` assigned replicas and two or more on one host,
    worst first."""
    exposed = []
    for workload, replicas in groups.items():
        if len(replicas) < max(min_replicas, 2):
            continue
        counts, unplaced = _host_counts(index, replicas)
        if not counts:
            continue
        worst_host, on_worst = min(counts.items(), key=lambda item: (-item[1], item[0]))
        if on_worst < 2:
            continue
        spread = host_spread(replicas)
        exposed.append(
            ExposedWorkload(
                kind=workload.kind,
                namespace=workload.namespace,
                name=workload.name,
                replicas=len(replicas),
                hosts=len(counts),
                worst_host=worst_host,
                on_worst_host=on_worst,
                share=round(on_worst / len(replicas), 4),
                unplaced=unplaced,
                coverage=host_coverage(index, replicas),
                spread="none" if spread is None else "required" if spread.hard else "preferred",
                spread_violated=spread is not None
                and spread_violated(index, workload.namespace, spread),
            )
        )
    exposed.sort(key=lambda e: (-e.share, -e.on_worst_host, e.kind, e.namespace, e.name))
    return exposed


def exposed_per_namespace(
    index: ClusterIndex,
    vmi_owners: Mapping[tuple[str, str], WorkloadRef] | None = None,
    min_replicas: int = DEFAULT_MIN_REPLICAS,
) -> dict[str, int]:
    """How many workloads are exposed in each namespace (the descheduler's gauge), grouped as
    `hostaffinity exposure` groups them: by owner, a VM's launcher pod by its VMI's owner."""
    groups = replica_groups(list(index.pods()), by_owner(vmi_owners))
    return dict(Counter(e.namespace for e in exposed_workloads(index, groups, min_replicas)))
