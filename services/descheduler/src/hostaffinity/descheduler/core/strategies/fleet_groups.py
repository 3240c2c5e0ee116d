"""RemovePodsViolatingFleetGroups (ours): members of one fleet group sharing an ESXi host.

Pods labelled `hostaffinity.io/fleet-group: <name>` are kept on different ESXi hosts from every
other member of the group, in this cluster and in every other: this cluster's members live from
the index (a vMotion counts as soon as the topology KV says so), other installs' from the fleet
view (`ClusterState.fleet`). On a host holding two or more members the member of lowest rank
stays (affinity/fleet_groups.py: a hash of group, cluster identity and pod, the same answer in
every install); each other member that is this cluster's own is a violation with itself as the
only candidate. Another cluster's member is never a candidate here: its own descheduler moves it
when the same rank says so. So of two clusters' members piled on one host exactly one is
evicted, never both; and if the one that should move cannot (a PodDisruptionBudget refuses, its
workload cools down, a limit is reached, no free host can take it), it is reported and stays,
and the other does not move in its place.

The planner's protections, limits, cooldowns and node fit hold as for any violation; a target
must be on a host that holds no member of the group (own members where this cycle's plan puts
them, other installs' where the fleet view places them). Every member is judged every cycle:
they are found through the label's index, so the cost follows the members, not the cluster.
"""

from __future__ import annotations

from typing import ClassVar

from hostaffinity.affinity.fleet_groups import FleetMember, fleet_group, own_members, stayer
from hostaffinity.affinity.index import PodRecord
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import (
    PodScope,
    ScopedArgs,
    TargetCheck,
    Violation,
)
from hostaffinity.descheduler.core.strategies.changes import SCOPE_CHANGES, Change
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.schema import LABEL_ESXI_HOST


class FleetGroupsArgs(ScopedArgs, frozen=True):
    """Which of this cluster's members may be moved (namespaces, labelSelector)."""


class FleetGroups:
    name: ClassVar[str] = "RemovePodsViolatingFleetGroups"
    triggers: ClassVar[Change] = SCOPE_CHANGES | Change.NODE_LABELS

    def __init__(self, args: FleetGroupsArgs) -> None:
        self.args = args
        self._scope = PodScope(args)

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        """Every own member that shares a host with another member and is not the one staying
        (`scope` is not needed: every member is judged)."""
        index = state.index
        own: dict[str, dict[str, list[PodRecord]]] = {}
        for record in own_members(index):
            group = fleet_group(record.labels)
            host = index.domain(record.node, LABEL_ESXI_HOST)
            if group is not None and host is not None:
                own.setdefault(group, {}).setdefault(host, []).append(record)
        found: list[Violation] = []
        for group, hosts in sorted(own.items()):
            others = state.fleet.on_hosts(group)
            for host, records in sorted(hosts.items()):
                there = others.get(host, ())
                if len(records) + len(there) >= 2:
                    found.extend(self._pile(state, group, host, records, there))
        return found

    def _pile(
        self,
        state: ClusterState,
        group: str,
        host: str,
        records: list[PodRecord],
        there: tuple[FleetMember, ...],
    ) -> list[Violation]:
        """The violations of one host's members: every own member but the one staying."""
        me = state.fleet.own_cluster
        members = [(me, r.key) for r in records] + [(m.cluster, m.pod) for m in there]
        stays = stayer(group, members)
        kept = stays[1] if stays[0] == me else f"{stays[1]} of cluster {stays[0]}"
        found = []
        for record in records:
            if (me, record.key) == stays or not self._scope.covers(state.pods[record.key]):
                continue
            sharing = [r.key for r in records if r.key != record.key]
            sharing += [m.describe() for m in there]
            rule = (
                f"fleet group {group}: {record.key} shares ESXi host {host} with "
                f"{', '.join(sorted(sharing))}"
            )
            why = f"{kept} stays on the host (the group's tie-break); {record.key} moves"
            improves = _free_of_group(state, group)
            found.append(Violation(self.name, rule, (record.key,), why, improves))
        return found


def _free_of_group(state: ClusterState, group: str) -> TargetCheck:
    """A target must be on a host holding no other member of the group: none of this cluster's
    (as planned so far this cycle) and none of another's."""
    index = state.index
    taken_elsewhere = state.fleet.on_hosts(group)

    def free(pod_key: str, node: str) -> bool:
        target = index.domain(node, LABEL_ESXI_HOST)
        if target is None or target in taken_elsewhere:
            return False
        return not any(
            r.key != pod_key and index.domain(r.node, LABEL_ESXI_HOST) == target
            for r in own_members(index, group)
        )

    return free
