"""What-if maintenance: the pods an ESXi host's node VMs carry, and whether each can go elsewhere.

Putting a host into maintenance takes its node VMs away (an operator drains them, or DRS has
nowhere to put them). The plan removes those nodes and their pods from the index, then places the
movers one at a time as kube-scheduler would: the engine's filter in kube-scheduler mode
(unschedulable, taints, node affinity, topology spread and inter-pod affinity on every domain,
the host domain included), then requests against allocatable (resources.insufficient). A
DoNotSchedule spread over ESXi hosts that the remaining hosts cannot honour is reported as an
unsatisfiable rule, like a host-level anti-affinity term. Each placed mover is
added to the index, so replicas of one anti-affine set are checked against each other. Each goes
to the fitting node with the most free CPU at that moment (LeastAllocated's preference, on CPU
only), so movers spread as the scheduler would spread them. DaemonSet and static pods stay with
their node and are not counted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import msgspec

from hostaffinity.affinity import explain
from hostaffinity.affinity.engine import AffinityEngine, FilterMode, FilterResult
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.resources import Resources, insufficient
from hostaffinity.affinity.workloads import VMI, stays_with_node, workload_of
from hostaffinity.schema.names import LABEL_ESXI_HOST
from hostaffinity.schema.reports import MaintenanceReport, PodMove, UnsatisfiableRule

_POD_RULES: Final = frozenset(
    {explain.INTER_POD_AFFINITY, explain.POD_TOPOLOGY_SPREAD, explain.HOST_AFFINITY}
)
_CPU: Final = "cpu"
_MAX_RULES_PER_POD: Final = 3
_FILTERED: Final = "filtered out"


class _Capacity:
    """Allocatable, what the pods on each node request, how many pods run there, and the nodes
    by free CPU (a heap with lazy deletion: an entry whose figure changed since is skipped)."""

    def __init__(self, allocatable: Mapping[str, Resources]) -> None:
        self.allocatable = allocatable
        self.used: dict[str, Resources] = {}
        self.pods: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []

    def add(self, node: str, request: Mapping[str, int]) -> None:
        used = self.used.setdefault(node, {})
        for name, value in request.items():
            used[name] = used.get(name, 0) + value
        self.pods[node] = self.pods.get(node, 0) + 1

    def lacks(self, node: str, request: Mapping[str, int]) -> list[str]:
        return insufficient(
            request, self.allocatable.get(node, {}), self.used.get(node, {}), self.pods.get(node, 0)
        )

    def _free_cpu(self, node: str) -> int:
        return self.allocatable.get(node, {}).get(_CPU, 0) - self.used.get(node, {}).get(_CPU, 0)

    def rank(self, nodes: Iterable[str]) -> None:
        """Start ranking these nodes (the ones left after the hosts are gone)."""
        self._heap = [(-self._free_cpu(node), node) for node in nodes]
        heapq.heapify(self._heap)

    def take_roomiest(
        self, fits: Callable[[str], list[str]], request: Mapping[str, int]
    ) -> tuple[str | None, dict[str, int]]:
        """The node with the most free CPU that `fits` accepts (empty list: no shortfall), with
        the request added to it; else None and how many nodes lacked what."""
        skipped: list[tuple[int, str]] = []
        shortfalls: dict[str, int] = {}
        chosen = None
        while self._heap:
            entry = heapq.heappop(self._heap)
            node = entry[1]
            if -entry[0] != self._free_cpu(node):
                continue  # stale: a fresher entry for this node is in the heap
            skipped.append(entry)
            lacking = fits(node)
            if not lacking:
                chosen = node
                skipped.pop()
                self.add(node, request)
                heapq.heappush(self._heap, (-self._free_cpu(node), node))
                break
            for reason in lacking:
                shortfalls[reason] = shortfalls.get(reason, 0) + 1
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        return chosen, shortfalls


def hosts_nodes(engine: AffinityEngine, hosts: Iterable[str]) -> list[str]:
    """The nodes whose ESXi host (the engine's host domain) is one of `hosts` (label values)."""
    by_host = engine.index.domains(LABEL_ESXI_HOST)
    return sorted({node for host in hosts for node in by_host.get(host, ())})


def plan_maintenance(
    engine: AffinityEngine,
    hosts: Iterable[str],
    pods: Mapping[str, Pod],
    requests: Mapping[str, Resources],
    allocatable: Mapping[str, Resources],
    nodes: Iterable[str] | None = None,
) -> MaintenanceReport:
    """Where every pod on the hosts' nodes would go. The engine's index is changed: pass one
    built for this plan. `pods` and `requests` are keyed `namespace/name`; `allocatable` by node.
    `hosts` are label values, whose nodes go, unless `nodes` names them (then `hosts` only name
    the hosts in the report): hosts of two vCenters may share a label value."""
    index = engine.index
    hosts = sorted(set(hosts))
    gone = hosts_nodes(engine, hosts) if nodes is None else sorted(set(nodes))
    capacity = _Capacity(allocatable)
    for record in index.pods():
        capacity.add(record.node, requests.get(record.key, {}))
    movers = sorted(
        record.key
        for node in gone
        for record in index.pods_on(node)
        if record.key in pods and not stays_with_node(pods[record.key])
    )
    for key in movers:
        index.remove_pod(key)
    for node in gone:
        index.remove_node(node)
    capacity.rank(index.all_nodes())
    moves: list[PodMove] = []
    rules: list[UnsatisfiableRule] = []
    for key in movers:
        pod = pods[key]
        move, pod_rules = _place(engine, capacity, pod, requests.get(key, {}))
        moves.append(move)
        rules.extend(pod_rules)
    return MaintenanceReport(
        hosts=hosts,
        nodes=gone,
        moves=moves,
        unsatisfiable_rules=rules,
        ok=all(move.verdict == "moves" for move in moves),
    )


def _place(
    engine: AffinityEngine,
    capacity: _Capacity,
    pod: Pod,
    request: Mapping[str, int],
) -> tuple[PodMove, list[UnsatisfiableRule]]:
    workload = workload_of(pod)
    move = PodMove(
        pod=pod.key,
        workload=str(workload) if workload else "",
        from_node=pod.spec.node_name,
        verdict="moves",
        vmi=f"{workload.namespace}/{workload.name}" if workload and workload.kind == VMI else "",
    )
    result = engine.filter(pod)
    if not result.feasible:
        rules = _host_level_rules(engine, pod, result)
        verdict = "unsatisfiable" if rules else "no-node"
        unsatisfiable = [UnsatisfiableRule(pod=pod.key, rule=rule) for rule in rules]
        return msgspec.structs.replace(
            move, verdict=verdict, reason=result.summary()
        ), unsatisfiable
    feasible = set(result.feasible)

    def fits(node: str) -> list[str]:
        return capacity.lacks(node, request) if node in feasible else [_FILTERED]

    node, shortfalls = capacity.take_roomiest(fits, request)
    if node is not None:
        engine.index.upsert_pod(_bound(pod, node))
        return msgspec.structs.replace(move, to_node=node), []
    shortfalls.pop(_FILTERED, None)
    counts = ", ".join(f"{count} {reason}" for reason, count in sorted(shortfalls.items()))
    reason = f"0/{len(feasible)} nodes that pass the filters have room: {counts}"
    return msgspec.structs.replace(move, verdict="no-room", reason=reason), []


def _host_level_rules(engine: AffinityEngine, pod: Pod, result: FilterResult) -> list[str]:
    """The required host-level rules that rejected nodes passing every other filter; empty when
    the nodes failed for other reasons (a node's first failing filter is the one reported)."""
    by_rule = {node for node, why in result.rejected.items() if why.plugin in _POD_RULES}
    if not by_rule:
        return []
    physical = engine.filter(pod, by_rule, mode=FilterMode.PHYSICAL)
    if not physical.rejected:
        return []
    terms = engine.terms(pod, FilterMode.PHYSICAL)
    own = [t.describe() for t in (*terms.required_anti, *terms.required_affinity)]
    own += [
        f"topology spread {c.describe()}" for c in engine.hard_spreads(pod, FilterMode.PHYSICAL)
    ]
    if own:
        return own
    return sorted({why.message for why in physical.rejected.values()})[:_MAX_RULES_PER_POD]


def _bound(pod: Pod, node: str) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))
