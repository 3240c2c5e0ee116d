"""Fleet groups: pods labelled `hostaffinity.io/fleet-group: <name>` are kept on different ESXi
hosts from every other pod of the group, whichever Kubernetes cluster runs them (opt-in). Pure;
shared by the descheduler, the scheduler-extender, the admission webhook and the drs-translator.

An install knows its own members live (its pods, its topology) and every other install's from
the fleet view (`hostaffinity-fleet`: a `WorkloadPlacement` per workload of every install, keyed
by the install's token), which `FleetMembers` holds by group and by host. Another install's
member is placed among this install's hosts by the host's name, as the node labels carry it
(`label_value(host_name)`, the domain this install's engine reads for `hostaffinity.io/esxi-host`):
the fleet view's `host_id` carries the vCenter's UUID, which no install's topology holds.

Which member stays on a host two or more share: the one of lowest `stay_rank`, a hash of the
group, its cluster's identity and its `namespace/name`. Every install computes the same answer
from the same members, so of two members piled on one host exactly one install moves its own pod
(never both, never neither), and the moves fall on no cluster in particular.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from hostaffinity.affinity.index import ClusterIndex, PodRecord
from hostaffinity.affinity.interpod import NamespaceScope
from hostaffinity.affinity.selectors import EXISTS, IN, Requirement, Selector
from hostaffinity.schema import LABEL_FLEET_GROUP, WorkloadPlacement, label_value

_EVERYWHERE: Final = NamespaceScope(everywhere=True)
# Every pod of any fleet group (the label's key is the index's anchor: cost ~ those pods).
ANY_GROUP: Final = Selector((Requirement(LABEL_FLEET_GROUP, EXISTS),))


def fleet_group(labels: Mapping[str, str]) -> str | None:
    """The pod's fleet group, or None when it has none (an empty value opts nothing in)."""
    return labels.get(LABEL_FLEET_GROUP) or None


def group_selector(group: str) -> Selector:
    return Selector((Requirement(LABEL_FLEET_GROUP, IN, frozenset((group,))),))


def own_members(index: ClusterIndex, group: str | None = None) -> Iterator[PodRecord]:
    """This cluster's placed members (of `group`, or of every group), terminating ones left
    out: they are leaving their host already."""
    selector = ANY_GROUP if group is None else group_selector(group)
    return (r for r in index.matching_pods(_EVERYWHERE, selector) if not r.terminating)


def stay_rank(group: str, cluster: str, pod: str) -> str:
    """A member's rank in its group: of the members sharing a host, the lowest stays."""
    return hashlib.sha256(f"{group}\x1f{cluster}\x1f{pod}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class FleetMember:
    """A member of another install, where the fleet view last placed it. `host` is the host's
    label value (how this install's topology names it), `pod` its `namespace/name`."""

    cluster: str
    pod: str
    host: str
    host_id: str
    host_name: str = ""
    node: str = ""
    vm_moid: str = ""
    vsphere_cluster_moid: str = ""

    def describe(self) -> str:
        return f"{self.pod} of cluster {self.cluster}"


def stayer(group: str, members: Iterable[tuple[str, str]]) -> tuple[str, str]:
    """Of (cluster, pod) members sharing one host, the one that stays there."""
    return min(members, key=lambda member: stay_rank(group, *member))


def _members_of(placement: WorkloadPlacement) -> tuple[FleetMember, ...]:
    """The placed replicas of a workload in a fleet group (none when it is in none)."""
    if not placement.fleet_group:
        return ()
    return tuple(
        FleetMember(
            cluster=placement.cluster,
            pod=f"{placement.namespace}/{replica.pod}",
            host=label_value(replica.host_name),
            host_id=replica.host_id,
            host_name=replica.host_name,
            node=replica.node,
            vm_moid=replica.vm_moid,
            vsphere_cluster_moid=replica.vsphere_cluster_moid,
        )
        for replica in placement.replicas
        if replica.host_name
    )


class FleetMembers:
    """Other installs' members of every fleet group, as the fleet view places them: by the key
    each came under, by group, and by host. This install's own workloads (`own_cluster`) are
    left out: its services know them live. `version` grows with every change that moved,
    added or removed a member."""

    def __init__(self, own_cluster: str) -> None:
        self.own_cluster = own_cluster
        self.version = 0
        self._group_of: dict[str, str] = {}  # fleet view key -> the group its members are in
        self._groups: dict[str, dict[str, tuple[FleetMember, ...]]] = {}
        self._hosts: dict[str, dict[str, tuple[FleetMember, ...]]] = {}  # per group, on demand

    def put(self, key: str, placement: WorkloadPlacement | None) -> bool:
        """The fleet view's value under `key` (None: deleted); whether any member changed."""
        members: tuple[FleetMember, ...] = ()
        if placement is not None and placement.cluster != self.own_cluster:
            members = _members_of(placement)
        group = placement.fleet_group if members and placement is not None else None
        before_group = self._group_of.get(key)
        before = () if before_group is None else self._groups[before_group][key]
        if before_group == group and before == members:
            return False
        if before_group is not None:
            self._drop(before_group, key)
        if group is not None:
            self._group_of[key] = group
            self._groups.setdefault(group, {})[key] = members
            self._hosts.pop(group, None)
        self.version += 1
        return True

    def replace(self, view: Mapping[str, WorkloadPlacement]) -> bool:
        """The whole fleet view at once (a new watch's replay); whether any member changed."""
        changed = False
        for key in set(self._group_of) - set(view):
            changed |= self.put(key, None)
        for key, placement in view.items():
            changed |= self.put(key, placement)
        return changed

    def _drop(self, group: str, key: str) -> None:
        del self._group_of[key]
        keys = self._groups[group]
        del keys[key]
        if not keys:
            del self._groups[group]
        self._hosts.pop(group, None)

    def groups(self) -> list[str]:
        """The groups with another install's member, sorted."""
        return sorted(self._groups)

    def of(self, group: str) -> list[FleetMember]:
        """Every other install's placed member of `group`."""
        return [m for members in self._groups.get(group, {}).values() for m in members]

    def on_hosts(self, group: str) -> Mapping[str, tuple[FleetMember, ...]]:
        """Other installs' members of `group` by host (label value)."""
        hosts = self._hosts.get(group)
        if hosts is None:
            grouped: dict[str, list[FleetMember]] = {}
            for member in self.of(group):
                grouped.setdefault(member.host, []).append(member)
            hosts = self._hosts[group] = {h: tuple(ms) for h, ms in grouped.items()}
        return hosts
