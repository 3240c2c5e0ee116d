"""RemoveDuplicates: replicas of one owner piled on one node (or, by setting, one ESXi host, rack
or zone).

Upstream (pkg/framework/plugins/removeduplicates/removeduplicates.go) counts replicas of each
owner per node and evicts down to the average over the nodes the pods fit,
ceil(replicas / feasible nodes) (getTargetNodes). Here the domain can be the ESXi host
(placements from the topology KV) or a failure domain above it (its node label), and a replica is
moved only to a domain below that average, so spreading never piles pods up somewhere else.

The feasible domains are counted only as far as the average needs: the engine is asked one node
at a time (`AffinityEngine.first_fit`, as node fit does) and stops once there are as many
domains as replicas (the average is then 1 whatever the rest) or every domain is found.

Only a crowded workload (some domain holds two or more of its replicas) can exceed the average,
which is at least 1. A full pass groups every workload's replicas and keeps which are crowded
(crowded.py); a scoped pass groups only those and the workloads its changes can have crowded
(read from the state's journals, so planned moves and changes that start no cycle count too),
and counts each one's feasible domains again, since any node's change can move its average.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import ClassVar, Final, Literal

import msgspec

from hostaffinity.affinity.interpod import HOSTNAME_KEY
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
    eviction_order,
)
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.crowded import CrowdedWorkloads
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.schema.names import LABEL_ESXI_HOST, LABEL_RACK, LABEL_ZONE

DOMAIN_KEYS: Final = {
    "node": HOSTNAME_KEY,
    "esxi-host": LABEL_ESXI_HOST,
    "rack": LABEL_RACK,
    "zone": LABEL_ZONE,
}


class DuplicatesArgs(ScopedArgs, frozen=True):
    exclude_owner_kinds: list[str] = msgspec.field(default_factory=list)
    # Ours: spread over nodes (upstream), ESXi hosts, racks or zones (the node-labeller's labels).
    domain: Literal["node", "esxi-host", "rack", "zone"] = "node"


class Duplicates:
    name: ClassVar[str] = "RemoveDuplicates"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.NODE_LABELS

    def __init__(self, args: DuplicatesArgs) -> None:
        self.args = args
        self._scope = PodScope(args)
        self._excluded = frozenset(args.exclude_owner_kinds)
        self._crowded = CrowdedWorkloads()

    def _domain(self, state: ClusterState, node: str) -> str | None:
        if self.args.domain == "node":
            return node if node in state.nodes else None
        return state.index.domain(node, DOMAIN_KEYS[self.args.domain])

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        """The crowded workloads, each held to its ceiling. A scoped cycle groups only those
        that may be crowded (CrowdedWorkloads), in the order a full pass takes them; the
        ceiling of each is counted again, since any node's change can move it."""
        judged = self._crowded.to_judge(state, full=scope is None)
        crowded: set[str] = set()
        found: list[Violation] = []
        for workload, keys in state.workloads.items():
            if judged is not None and workload not in judged:
                continue
            by_domain = self._crowding(state, keys)
            if by_domain is None:
                continue
            crowded.add(workload)
            sample = state.pods[next(iter(keys))]
            refs = sample.metadata.owner_references
            if not refs or any(r.kind in self._excluded for r in refs):
                continue
            if not self._scope.covers(sample):
                continue
            found.extend(self._spread(state, workload, sample.key, by_domain))
        self._crowded.found(crowded)
        return found

    def _crowding(self, state: ClusterState, keys: set[str]) -> dict[str, list[str]] | None:
        """The replicas by domain when some domain holds two or more of them, else None."""
        if len(keys) < 2:
            return None
        if self.args.domain == "node" and _one_per_node(state, keys):
            return None  # no node holds two of them
        by_domain: dict[str, list[str]] = {}
        for key in keys:
            domain = self._domain(state, state.pods[key].spec.node_name)
            if domain is not None:
                by_domain.setdefault(domain, []).append(key)
        if all(len(group) < 2 for group in by_domain.values()):
            return None
        return by_domain

    def _spread(
        self, state: ClusterState, workload: str, sample: str, by_domain: dict[str, list[str]]
    ) -> list[Violation]:
        total = sum(len(group) for group in by_domain.values())
        domains, complete = self._feasible_domains(state, sample, set(by_domain), total)
        ceiling = math.ceil(total / max(1, len(domains)))
        over = f"{len(domains)}" if complete else f"at least {len(domains)}"
        found = []
        for domain, group in sorted(by_domain.items()):
            if len(group) <= ceiling:
                continue
            order = eviction_order(state, group)
            rule = (
                f"{len(group)} replicas of {workload} on {self.args.domain} {domain}; "
                f"at most {ceiling} each over {over} feasible"
            )
            for key in order[: len(group) - ceiling]:
                found.append(
                    Violation(
                        self.name, rule, (key,), improves=self._below(state, workload, ceiling)
                    )
                )
        return found

    def _feasible_domains(
        self, state: ClusterState, sample: str, domains: set[str], replicas: int
    ) -> tuple[set[str], bool]:
        """The domains the replicas occupy plus those of nodes the engine lets `sample` on,
        gathered until they number `replicas` (True: all of them were counted)."""
        index = state.index
        if self.args.domain == "node":
            every = len(state.nodes)
        else:
            every = len(index.domains(DOMAIN_KEYS[self.args.domain]))
        enough = min(replicas, every)

        def counted(node: str) -> bool:
            domain = self._domain(state, node)
            if domain is not None:
                domains.add(domain)
            return len(domains) >= enough

        if len(domains) < enough:
            state.engine.first_fit(state.pods[sample], index.node_names, counted)
        return domains, len(domains) < replicas or len(domains) >= every

    def _below(self, state: ClusterState, workload: str, ceiling: int) -> TargetCheck:
        def improves(pod_key: str, node: str) -> bool:
            target = self._domain(state, node)
            if target is None:
                return False
            counts = Counter(
                self._domain(state, state.pods[k].spec.node_name)
                for k in state.workloads.get(workload, ())
            )
            return counts[target] < ceiling

        return improves


def _one_per_node(state: ClusterState, keys: set[str]) -> bool:
    """Whether every replica is on a node of its own: the common case, answered by one set
    built in C instead of a domain looked up and grouped per replica."""
    pods = state.pods
    return len({pods[key].spec.node_name for key in keys}) == len(keys)
