"""The drs-translator's cluster reports (`report.<vcenter>.<cluster-moid>`) as sentences for
`status` and `explain pod`: each DRS rule or group this install wants that vCenter does not
hold, and what other installs' rules on the same hosts do to maintenance and failover. Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from hostaffinity.schema import DrsClusterReport, TopologyEvent, UnprotectedGroup

# What each reason means to an operator, first.
REASON_WORDS = {
    "too-few-hosts": "more VMs to keep apart than hosts",
    "together-and-apart": "VMs asked to be both together and apart",
    "no-common-host": "'must' VM-Host rules with no host in common",
    "prefix-without-record": "vCenter holds an object of this name that this install did not make",
    "refused": "vCenter refused it",
    "not-yet": "not applied yet",
}
KIND_WORDS = {
    "vm-anti-affinity": "anti-affinity rule",
    "vm-affinity": "affinity rule",
    "vm-host": "VM-Host rule",
    "vm-group": "VM group",
    "host-group": "host group",
}


def not_held(reports: Iterable[DrsClusterReport], pod: str | None = None) -> list[str]:
    """A sentence per rule or group vCenter does not hold (only those asked for `pod`, if
    given), by vCenter, cluster and name."""
    sentences = []
    for report in sorted(reports, key=lambda r: (r.vcenter, r.cluster_moid)):
        for group in report.unprotected:
            if pod is None or pod in group.pods:
                sentences.append(_not_held(report, group))
    return sentences


def _not_held(report: DrsClusterReport, group: UnprotectedGroup) -> str:
    pods = ", ".join(group.pods[:3]) + (
        f" and {len(group.pods) - 3} more" if len(group.pods) > 3 else ""
    )
    why = REASON_WORDS.get(group.reason, group.reason)
    return (
        f"DRS {KIND_WORDS.get(group.kind, group.kind)} {group.name} (cluster "
        f"{report.cluster_moid} of vCenter {report.vcenter}) is not in vCenter since "
        f"{group.since}: {why}"
        + (f" ({group.message})" if group.message else "")
        + (f"; it is for pods {pods}" if pods else "")
    )


def shared_hosts(
    reports: Iterable[DrsClusterReport], clusters: Collection[tuple[str, str]] | None = None
) -> list[str]:
    """A sentence per other install's rule that blocks a host's maintenance or leaves no
    failover room (only in `clusters`, (vCenter, cluster moid) pairs, if given)."""
    return [
        f"{warning.message} (cluster {report.cluster_moid} of vCenter {report.vcenter})"
        for report in sorted(reports, key=lambda r: (r.vcenter, r.cluster_moid))
        if clusters is None or (report.vcenter, report.cluster_moid) in clusters
        for warning in report.shared_hosts
    ]


def cluster_identity(last_events: Sequence[TopologyEvent]) -> tuple[str, list[str]]:
    """The cluster identity the services stamp on their events, and a sentence when they do not
    all say the same (a service not reading the shared config section, say)."""
    named = {event.source: event.cluster for event in last_events if event.cluster}
    identities = sorted(set(named.values()))
    if len(identities) <= 1:
        return (identities[0] if identities else ""), []
    by = ", ".join(f"{source}: {cluster}" for source, cluster in sorted(named.items()))
    return identities[0], [
        f"the services do not agree on which cluster this is ({by}): set shared.cluster.name "
        "once, in the shared ConfigMap every service reads"
    ]
