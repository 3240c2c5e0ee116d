"""kube-scheduler's questions answered from the cache: filter and prioritize, no I/O.

Only host-level terms and topology spreads are decided here (PHYSICAL mode); kube-scheduler
enforces every other rule itself. A pod that no host-level required term or DoNotSchedule spread
concerns passes every node it is asked about, including nodes the cache has not seen yet, so a
lagging informer never blocks ordinary pods.

A concerned pod that passes is narrowed to the nodes of one ESXi host and reserved there
(`ExtenderCache.reserve`): kube-scheduler filters the next pod before this one is bound, and the
next replica must already see which host this one took.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from itertools import compress
from typing import Final

import msgspec

from hostaffinity.affinity.engine import FilterMode
from hostaffinity.affinity.explain import Rejection
from hostaffinity.affinity.index import TermKind
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.scoring import (
    MAX_EXTENDER_PRIORITY,
    MAX_NODE_SCORE,
    SparseScores,
    combine,
)
from hostaffinity.scheduler_extender.core.cache import ExtenderCache, owner_of
from hostaffinity.scheduler_extender.core.extender_v1 import (
    AskedNodes,
    ExtenderFilterResult,
    HostPriority,
)
from hostaffinity.scheduler_extender.core.fleet_filter import fleet_member, without_fleet_hosts
from hostaffinity.schema.names import LABEL_ESXI_HOST

FEASIBLE: Final = "feasible"
UNSCHEDULABLE: Final = "unschedulable"
SCORED: Final = "scored"
BOUND: Final = "bound"
ERROR: Final = "error"


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What one answer amounted to, for metrics and decision events."""

    outcome: str
    asked: int
    passed: int = 0
    node: str = ""
    rejections: dict[str, int] = msgspec.field(default_factory=dict)
    message: str = ""


def not_synced_message(cache: ExtenderCache) -> str | None:
    """Why the cache cannot answer yet, or None when it can."""
    waiting = cache.not_synced()
    if not waiting:
        return None
    return f"hostaffinity scheduler-extender cache is not synced yet ({', '.join(waiting)})"


def _applies(
    cache: ExtenderCache, pod: Pod, own: tuple[TermKind, ...], existing: tuple[TermKind, ...]
) -> bool:
    """Whether a host-level term of the `own` kinds is the pod's, or one of the `existing` kinds
    of another pod selects it."""
    terms = cache.engine.terms(pod, FilterMode.PHYSICAL)
    if any(getattr(terms, kind) for kind in own):
        return True
    meta = pod.metadata
    return any(
        term.physical and record.key != pod.key
        for kind in existing
        for record, term in cache.index.terms_matching(kind, meta.namespace, meta.labels)
    )


def concerns(cache: ExtenderCache, pod: Pod) -> bool:
    """Whether a host-level required rule applies: the pod's own term or DoNotSchedule spread,
    or an existing pod's anti-affinity that selects it."""
    if cache.engine.hard_spreads(pod, FilterMode.PHYSICAL):
        return True
    return _applies(cache, pod, ("required_affinity", "required_anti"), ("required_anti",))


def preferred_scores(cache: ExtenderCache, pod: Pod, names: list[str]) -> SparseScores:
    """0..100 per node from host-level preferred terms (and existing pods' terms that score
    the pod) and ScheduleAnyway host spreads; 0 for every node when none applies, and for a
    node the cache does not know."""
    scoring: tuple[TermKind, ...] = ("required_affinity", "preferred_affinity", "preferred_anti")
    soft_spread = any(c.soft for c in cache.engine.spreads(pod, FilterMode.PHYSICAL))
    inter_pod = _applies(cache, pod, ("preferred_affinity", "preferred_anti"), scoring)
    if not soft_spread and not inter_pod:
        return SparseScores(0)
    result = cache.engine.score(pod, names, mode=FilterMode.PHYSICAL)
    top = result.max_total
    total = result.inter_pod_affinity
    if top > MAX_NODE_SCORE:  # the spread scored too: alone, or averaged with the terms
        if inter_pod:
            total = combine(lambda score: score * MAX_NODE_SCORE // top, result.total)
        else:
            total = result.topology_spread
    if len(result.nodes) == len(names):
        return total
    unknown = set(names).difference(result.nodes)
    return SparseScores(total.base, total.special | dict.fromkeys(unknown, 0))


def in_flight_selected(cache: ExtenderCache, pod: Pod) -> list[str]:
    """In-flight pods without a reservation that one of the pod's own host-level required terms
    or DoNotSchedule spreads selects: their placement decides this filter, so it waits for it
    (bounded). A spread counts only pods of its own namespace."""
    terms = cache.engine.terms(pod, FilterMode.PHYSICAL)
    own = terms.required_affinity + terms.required_anti
    spreads = cache.engine.hard_spreads(pod, FilterMode.PHYSICAL)
    if not own and not spreads:
        return []
    namespaces = cache.index.namespaces

    def selects(other: Pod) -> bool:
        meta = other.metadata
        if meta.namespace == pod.metadata.namespace and any(
            c.selector.matches(meta.labels) for c in spreads
        ):
            return True
        ns_labels = namespaces.get(meta.namespace, {})
        return any(term.matches(meta.namespace, meta.labels, ns_labels) for term in own)

    selectors = [c.selector for c in spreads] + [term.selector for term in own]
    key = pod.key
    return [
        other
        for entry in cache.in_flight.unplaced_selectable(selectors)
        if (other := entry.pod.key) != key and selects(entry.pod)
    ]


def _domains(cache: ExtenderCache, nodes: list[str]) -> list[str]:
    """Each node's ESXi host (`node <name>` for a node without one), in order: one lookup
    pass with no call per node, as a concerned pod's filter passes hundreds of nodes."""
    hosts = map(cache.index.hosts_of_nodes(LABEL_ESXI_HOST).get, nodes)
    return [
        host if host is not None else f"node {node}"
        for host, node in zip(hosts, nodes, strict=True)
    ]


def reserved_host(hosts: list[str], rng: random.Random) -> str:
    """The ESXi host to hold a concerned pod, from its passing nodes' hosts: the one with the
    most passing nodes (the most choice left to kube-scheduler's scoring), ties at random."""
    counts = Counter(hosts)
    most = max(counts.values())
    return rng.choice(sorted(host for host, count in counts.items() if count == most))


def reservation_message(pod: Pod, host: str) -> str:
    return (
        f"hostaffinity: pod {pod.key} is held on ESXi host {host} so that the pods scheduled "
        "after it see its host before it is bound"
    )


def failure_message(rejection: Rejection) -> str:
    """kube-scheduler's reason first (it aggregates those), then the engine's explanation."""
    return f"{rejection.reason}: {rejection.message}"


def filter_nodes(
    cache: ExtenderCache, pod: Pod, asked: AskedNodes, rng: random.Random | None = None
) -> tuple[ExtenderFilterResult, Verdict]:
    """The filter answer: a subset of the asked nodes, each other node with its reason; a
    concerned pod's passing nodes are those of one host, where it is reserved."""
    waiting = not_synced_message(cache)
    if waiting is not None:
        return ExtenderFilterResult(error=waiting), Verdict(
            outcome=ERROR, asked=len(asked.names), message=waiting
        )
    rejected: Mapping[str, Rejection] = {}
    passed = asked.names
    summary = ""
    fleet = fleet_member(pod)
    concerned = concerns(cache, pod) or fleet
    if concerned:
        result = cache.engine.filter(pod, asked.names, mode=FilterMode.PHYSICAL)
        passed, rejected = result.feasible, result.rejected
        summary = result.summary() if not passed else ""
        if fleet and passed:
            passed, rejected, summary = without_fleet_hosts(
                cache, pod, len(asked.names), passed, rejected
            )
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for node, why in rejected.items():
        (unresolvable if why.unresolvable else failed)[node] = failure_message(why)
    if concerned and passed:
        hosts = _domains(cache, passed)
        host = reserved_host(hosts, rng or random.Random())
        held = list(compress(passed, map(host.__eq__, hosts)))
        failed.update(dict.fromkeys(set(passed).difference(held), reservation_message(pod, host)))
        passed = held
        cache.reserve(pod, held[0])
    nodes, names = asked.answer(passed) if concerned else asked.everyone()
    answer = ExtenderFilterResult(
        nodes=nodes,
        node_names=names,
        failed_nodes=failed,
        failed_and_unresolvable_nodes=unresolvable,
    )
    verdict = Verdict(
        outcome=FEASIBLE if passed else UNSCHEDULABLE,
        asked=len(asked.names),
        passed=len(passed),
        rejections=dict(Counter(why.reason for why in rejected.values())),
        message=summary,
    )
    return answer, verdict


def spread_scores(cache: ExtenderCache, pod: Pod, names: list[str]) -> SparseScores:
    """0..100 per node: fewer replicas of the pod's owner on the node's ESXi host is better.

    SelectorSpread's formula (MAX * (most - here) / most) with the ESXi host as the domain; a
    pod without a controller, or whose owner has no placed replica, scores every node the same.
    """
    owner = owner_of(pod)
    if owner is None:
        return SparseScores(MAX_NODE_SCORE)
    counts: Counter[str] = Counter()
    for key, node in cache.replicas(owner).items():
        host = cache.host_of(node)
        if host is not None and key != pod.key:
            counts[host] += 1
    if not counts:
        return SparseScores(MAX_NODE_SCORE)
    most = max(counts.values())
    by_host = cache.index.domains(LABEL_ESXI_HOST)
    asked = set(names)
    special = {
        node: MAX_NODE_SCORE * (most - count) // most
        for host, count in counts.items()
        for node in by_host.get(host, ())
        if node in asked
    }
    return SparseScores(MAX_NODE_SCORE, special)


def prioritize(
    cache: ExtenderCache, pod: Pod, asked: AskedNodes
) -> tuple[list[HostPriority] | None, Verdict]:
    """Scores 0..10 for every asked node: the mean of the preferred host-level terms' score and
    the owner's host spread. None (with the reason) while the cache is not synced: the
    prioritize answer has no Error field, so the caller answers with an HTTP error instead."""
    waiting = not_synced_message(cache)
    if waiting is not None:
        return None, Verdict(outcome=ERROR, asked=len(asked.names), message=waiting)
    names = asked.names
    scale = 2 * MAX_NODE_SCORE
    combined = combine(
        lambda preferred, spread: (preferred + spread) * MAX_EXTENDER_PRIORITY // scale,
        preferred_scores(cache, pod, names),
        spread_scores(cache, pod, names),
    )
    if combined.special:
        scores = list(combined.over(names))
        best = names[scores.index(max(scores))] if scores else ""
    else:  # every node alike, as for most pods: nothing to look up or compare per node
        scores = [combined.base] * len(names)
        best = names[0] if names else ""
    # Positional HostPriority built in C (map): the answer is the one per-node object.
    priorities = list(map(HostPriority, names, scores))
    verdict = Verdict(
        outcome=SCORED,
        asked=len(asked.names),
        passed=len(priorities),
        node=best,
    )
    return priorities, verdict
