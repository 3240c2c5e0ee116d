"""Host headroom: whether a required anti-affinity term on the ESXi host leaves a rollout room.

Such a term lets at most one of the pods it selects run on each host. When the pods it selects
(the pod itself included) are as many as the hosts the pod may use, there is no host for one
more: a rolling update's surge pod, or a replica re-created while its predecessor terminates,
stays Pending until an old pod goes -- for ever when the rollout waits for the new pod first
(maxUnavailable 0). That is the classic replicas >= domains deadlock, and it comes sooner on
hosts than on nodes, since hosts are fewer. The admission webhook warns with it, and
`hostaffinity explain` / `status` say it.

The hosts a pod may use: those of the nodes that pass its node-level filters (unschedulable,
taints, node affinity), whatever its inter-pod terms say. The engine's filter rejects each node
at its first failing stage, and the inter-pod stages come last, so a node rejected by an
inter-pod plugin (or not rejected) passed the node-level ones.
"""

from __future__ import annotations

from typing import Final

import msgspec

from hostaffinity.affinity import explain
from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.interpod import HOST_KEYS, AffinityTerm, incoming_scope
from hostaffinity.affinity.model import Pod

_INTER_POD: Final = frozenset({explain.INTER_POD_AFFINITY, explain.HOST_AFFINITY})


class HostHeadroom(msgspec.Struct, frozen=True):
    """One required host-level anti-affinity term of `pod` with no host to spare."""

    pod: str
    rule: str
    replicas: int
    usable_hosts: int

    def sentence(self) -> str:
        return (
            f"{self.replicas} pod(s) (this one included) are selected by its required "
            f"anti-affinity {self.rule}, and only {self.usable_hosts} ESXi host(s) can take "
            "them: one more replica (a rolling update's surge pod) cannot be scheduled until "
            "one of them goes. Roll out with maxSurge 0 and maxUnavailable 1, add hosts, or "
            "scope the term to the revision (matchLabelKeys: [pod-template-hash])"
        )


def usable_hosts(engine: AffinityEngine, pod: Pod, key: str) -> set[str]:
    """The `key` domains of the nodes whose node-level filters let the pod in."""
    result = engine.filter(pod)
    passed = [
        *result.feasible,
        *(node for node, why in result.rejected.items() if why.plugin in _INTER_POD),
    ]
    return {host for node in passed if (host := engine.index.domain(node, key)) is not None}


def _selected(engine: AffinityEngine, pod: Pod, term: AffinityTerm) -> int:
    """The assigned pods the term selects, plus the pod itself where it matches its own term."""
    scope = incoming_scope(term, engine.index.namespaces)
    keys = {record.key for record in engine.index.matching_pods(scope, term.selector)}
    if pod.metadata.namespace in scope and term.selector.matches(pod.metadata.labels):
        keys.add(pod.key)
    return len(keys)


def host_headroom(engine: AffinityEngine, pod: Pod) -> list[HostHeadroom]:
    """The pod's required host-level anti-affinity terms whose selected pods fill every usable
    host (one per selector and scope: a hostname term read physically and its host-key twin
    are one rule)."""
    tight: list[HostHeadroom] = []
    seen: set[tuple[str, str, frozenset[str]]] = set()
    hosts: dict[str, int] = {}
    for term in engine.terms(pod).required_anti:
        if term.topology_key not in HOST_KEYS:
            continue
        rule = (term.selector.describe(), term.namespace_selector.describe(), term.namespaces)
        if rule in seen:
            continue
        seen.add(rule)
        if term.topology_key not in hosts:
            hosts[term.topology_key] = len(usable_hosts(engine, pod, term.topology_key))
        usable = hosts[term.topology_key]
        replicas = _selected(engine, pod, term)
        if usable and replicas >= usable:
            tight.append(HostHeadroom(pod.key, term.describe(), replicas, usable))
    return tight


def tight_workloads(engine: AffinityEngine, pods: dict[str, Pod]) -> list[HostHeadroom]:
    """One entry per rule with no room, from one pod of each workload (its controller, or the
    pod itself) that has a required host-level anti-affinity term; in rule order."""
    found: dict[tuple[str, str], HostHeadroom] = {}
    asked: set[str] = set()
    for record in engine.index.pods():
        if not any(t.topology_key in HOST_KEYS for t in record.terms.required_anti):
            continue
        workload = str(record.workload) if record.workload else record.key
        pod = pods.get(record.key)
        if workload in asked or pod is None:
            continue
        asked.add(workload)
        for tight in host_headroom(engine, pod):
            found.setdefault((record.namespace, tight.rule), tight)
    return [found[rule] for rule in sorted(found)]
