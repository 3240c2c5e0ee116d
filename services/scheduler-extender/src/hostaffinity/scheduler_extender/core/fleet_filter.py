"""Fleet groups in the filter: a pod labelled `hostaffinity.io/fleet-group: <name>` is refused
the nodes whose ESXi host holds another member of its group, this cluster's (placed, or reserved
while in flight, as the cache's index counts them) or another cluster's (where the fleet view,
`ExtenderCache.fleet`, places it; a snapshot that is as fresh as the hub's mirror).

Such a pod counts as concerned (answers.py), so it is reserved on one host while in flight, and
the member scheduled next, before this one is bound, finds that host taken. Where every node is
refused the pod waits, unschedulable, as for any required rule the extender decides; the
descheduler and the other clusters' moves make room (docs/fleet-groups.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from hostaffinity.affinity.explain import Rejection, fit_error_message
from hostaffinity.affinity.fleet_groups import fleet_group, own_members
from hostaffinity.affinity.model import Pod
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.schema import LABEL_ESXI_HOST

PLUGIN: Final = "HostaffinityFleetGroup"
REASON: Final = "node(s) are on an ESXi host holding another member of the pod's fleet group"
# Members named per refused host in the message (the rest are counted).
NAMED: Final = 3


def fleet_member(pod: Pod) -> bool:
    return fleet_group(pod.metadata.labels) is not None


def _taken(cache: ExtenderCache, pod: Pod, group: str) -> dict[str, list[str]]:
    """Host -> the other members of the group on it."""
    taken: dict[str, list[str]] = {}
    for host, members in cache.fleet.on_hosts(group).items():
        taken.setdefault(host, []).extend(m.describe() for m in members)
    for record in own_members(cache.index, group):
        placed = cache.host_of(record.node)
        if record.key != pod.key and placed is not None:
            taken.setdefault(placed, []).append(record.key)
    return taken


def without_fleet_hosts(
    cache: ExtenderCache,
    pod: Pod,
    asked: int,
    passed: Sequence[str],
    rejected: Mapping[str, Rejection],
) -> tuple[list[str], dict[str, Rejection], str]:
    """`passed` less the nodes on hosts holding another member of the pod's group, `rejected`
    with those nodes and why, and kube-scheduler's summary when nothing passed."""
    group = fleet_group(pod.metadata.labels)
    refused: dict[str, Rejection] = {}
    if group is not None:
        taken = _taken(cache, pod, group)
        hosts = cache.index.hosts_of_nodes(LABEL_ESXI_HOST)
        why: dict[str, Rejection] = {}
        for node in passed:
            host = hosts.get(node)
            if host is None or host not in taken:
                continue
            if host not in why:
                members = sorted(taken[host])
                named = ", ".join(members[:NAMED])
                more = f" and {len(members) - NAMED} more" if len(members) > NAMED else ""
                message = f"ESXi host {host} holds {named}{more} of fleet group {group}"
                why[host] = Rejection(PLUGIN, REASON, False, message)
            refused[node] = why[host]
    kept = [node for node in passed if node not in refused]
    merged = {**rejected, **refused}
    return kept, merged, "" if kept else fit_error_message(asked, merged)
