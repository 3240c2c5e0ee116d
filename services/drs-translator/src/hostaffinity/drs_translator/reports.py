"""The per-cluster reports in the `hostaffinity-drs` bucket (`report.<vcenter>.<cluster-moid>`):
what needs attention, kept for as long as it lasts, where `hostaffinity status`, `explain` and
the alerts read it. One vCenter's reports: rewritten only when they change, deleted when there
is nothing left to say, and when a problem was first seen survives a restart (`since`)."""

from collections.abc import Iterable, Sequence

import msgspec
from nats.js.kv import KeyValue

from hostaffinity.runtime.bus.kv import decoded_values
from hostaffinity.schema import (
    DrsClusterReport,
    OtherInstallRule,
    SharedHostsWarning,
    UnprotectedGroup,
    drs_report_key,
    utc_timestamp,
)
from hostaffinity.schema.names import DRS_REPORT_KEY_PREFIX

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(DrsClusterReport)


class ClusterReports:
    """The reports of one vCenter, by cluster moid (the copy in memory is what the bucket has)."""

    def __init__(self, kv: KeyValue, vcenter: str, cluster: str) -> None:
        self._kv = kv
        self._vcenter = vcenter
        self._cluster = cluster  # this install's identity
        self.by_cluster: dict[str, DrsClusterReport] = {}

    async def load(self) -> None:
        """The reports of our vCenter the bucket holds (one that does not decode is left out
        and rewritten at the next cycle)."""
        for report in await decoded_values(self._kv, DRS_REPORT_KEY_PREFIX, _decoder, "report"):
            if report.vcenter == self._vcenter:
                self.by_cluster[report.cluster_moid] = report

    async def put(
        self,
        cluster_moid: str,
        unprotected: Sequence[UnprotectedGroup],
        others: Sequence[OtherInstallRule],
        warnings: Sequence[SharedHostsWarning],
    ) -> None:
        """The cluster's report as it stands; written only when it changed."""
        before = self.by_cluster.get(cluster_moid)
        now = utc_timestamp()
        first_seen = {(g.name, g.reason): g.since for g in (before.unprotected if before else ())}
        report = DrsClusterReport(
            vcenter=self._vcenter,
            cluster_moid=cluster_moid,
            cluster=self._cluster,
            reported_at=now,
            unprotected=[
                msgspec.structs.replace(g, since=first_seen.get((g.name, g.reason)) or now)
                for g in unprotected
            ],
            other_installs=list(others),
            shared_hosts=list(warnings),
        )
        if not (report.unprotected or report.other_installs or report.shared_hosts):
            await self.forget(cluster_moid)
            return
        if before is not None and _same(before, report):
            return
        await self._kv.put(drs_report_key(self._vcenter, cluster_moid), _encoder.encode(report))
        self.by_cluster[cluster_moid] = report

    async def keep_only(self, clusters: Iterable[str]) -> None:
        """Forget the reports of clusters the last cycle did not visit."""
        for cluster_moid in set(self.by_cluster) - set(clusters):
            await self.forget(cluster_moid)

    async def forget(self, cluster_moid: str) -> None:
        if self.by_cluster.pop(cluster_moid, None) is not None:
            await self._kv.delete(drs_report_key(self._vcenter, cluster_moid))


def _same(a: DrsClusterReport, b: DrsClusterReport) -> bool:
    return msgspec.structs.replace(a, reported_at="") == msgspec.structs.replace(b, reported_at="")
