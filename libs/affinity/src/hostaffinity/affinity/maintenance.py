"""What-if maintenance: the pods an ESXi host's node VMs carry, and whether each can go elsewhere.

Putting a host into maintenance takes its node VMs away (an operator drains them, or DRS has
nowhere to put them). The plan removes those nodes and their pods from the index, then places the
movers one at a time as kube-scheduler would: the engine's filter in kube-scheduler mode
(unschedulable, taints, node affinity, inter-pod affinity on every domain, the host domain
included), then requests against allocatable (resources.insufficient). Each placed mover is
added to the index, so replicas of one anti-affine set are checked against each other. Nodes are
tried with the most free CPU at the start first (LeastAllocated's preference, not re-sorted
between pods). DaemonSet and static pods stay with their node and are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from hostaffinity.affinity import explain
from hostaffinity.affinity.engine import AffinityEngine, FilterMode, FilterResult
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.resources import Resources, insufficient
from hostaffinity.affinity.workloads import VMI, stays_with_node, workload_of
from hostaffinity.schema.names import LABEL_ESXI_HOST
from hostaffinity.schema.reports import MaintenanceReport, PodMove, UnsatisfiableRule

_INTER_POD: Final = frozenset({explain.INTER_POD_AFFINITY, explain.HOST_AFFINITY})
_CPU: Final = "cpu"
_MAX_RULES_PER_POD: Final = 3


class _Capacity:
    """Allocatable, what the pods on each node request, and how many pods run there."""

    def __init__(self, allocatable: Mapping[str, Resources]) -> None:
        self.allocatable = allocatable
        self.used: dict[str, Resources] = {}
        self.pods: dict[str, int] = {}

    def add(self, node: str, request: Mapping[str, int]) -> None:
        used = self.used.setdefault(node, {})
        for name, value in request.items():
            used[name] = used.get(name, 0) + value
        self.pods[node] = self.pods.get(node, 0) + 1

    def lacks(self, node: str, request: Mapping[str, int]) -> list[str]:
        return insufficient(
            request, self.allocatable.get(node, {}), self.used.get(node, {}), self.pods.get(node, 0)
        )

    def roomiest_first(self, nodes: Iterable[str]) -> list[str]:
        def free_cpu(node: str) -> int:
            return self.allocatable.get(node, {}).get(_CPU, 0) - self.used.get(node, {}).get(
                _CPU, 0
            )

        return sorted(nodes, key=lambda node: (-free_cpu(node), node))


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
) -> MaintenanceReport:
    """Where every pod on the hosts' nodes would go. The engine's index is changed: pass one
    built for this plan. `pods` and `requests` are keyed `namespace/name`; `allocatable` by node."""
    index = engine.index
    hosts = sorted(set(hosts))
    gone = hosts_nodes(engine, hosts)
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
    order = capacity.roomiest_first(index.all_nodes())
    moves: list[PodMove] = []
    rules: list[UnsatisfiableRule] = []
    for key in movers:
        pod = pods[key]
        move, pod_rules = _place(engine, capacity, order, pod, requests.get(key, {}))
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
    order: list[str],
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
    shortfalls: dict[str, int] = {}
    for node in order:
        if node not in feasible:
            continue
        lacking = capacity.lacks(node, request)
        if not lacking:
            capacity.add(node, request)
            engine.index.upsert_pod(_bound(pod, node))
            return msgspec.structs.replace(move, to_node=node), []
        for reason in lacking:
            shortfalls[reason] = shortfalls.get(reason, 0) + 1
    counts = ", ".join(f"{count} {reason}" for reason, count in sorted(shortfalls.items()))
    reason = f"0/{len(feasible)} nodes that pass the filters have room: {counts}"
    return msgspec.structs.replace(move, verdict="no-room", reason=reason), []


def _host_level_rules(engine: AffinityEngine, pod: Pod, result: FilterResult) -> list[str]:
    """The required host-level rules that rejected nodes passing every other filter; empty when
    the nodes failed for other reasons (a node's first failing filter is the one reported)."""
    by_rule = {node for node, why in result.rejected.items() if why.plugin in _INTER_POD}
    if not by_rule:
        return []
    physical = engine.filter(pod, by_rule, mode=FilterMode.PHYSICAL)
    if not physical.rejected:
        return []
    terms = engine.terms(pod, FilterMode.PHYSICAL)
    own = [t.describe() for t in (*terms.required_anti, *terms.required_affinity)]
    if own:
        return own
    return sorted({why.message for why in physical.rejected.values()})[:_MAX_RULES_PER_POD]


def _bound(pod: Pod, node: str) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))
