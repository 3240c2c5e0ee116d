"""vSphere HA's settings of the clusters that hold rules of ours, kept in the `hostaffinity-drs`
bucket (`ha.<vcenter>.<cluster-moid>` → ClusterHaSettings) for the CLI's HA audit.

With "VM anti-affinity rules must be respected during failover", an anti-affinity rule of ours
whose VMs number the usable hosts leaves a node VM unrestartable after one host failure. Only the
CLI can say so (it sees the rules, the placements and the hosts together), and the CLI never logs
in to vCenter: the drs-translator, which already reads these clusters' configurationEx, records
their dasConfig. Read every `refresh_seconds`; written only when it changed.
"""

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.js.kv import KeyValue
from pyVmomi import vim

from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.schema import (
    HA_RESPECT_VM_ANTI_AFFINITY_OPTION,
    ClusterHaSettings,
    drs_ha_key,
    utc_timestamp,
)
from hostaffinity.schema.drs import HaAdmissionPolicy

_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
# The admission control policies of the vSphere API (vim.cluster.*AdmissionControlPolicy).
_POLICIES: tuple[tuple[type[Any], HaAdmissionPolicy], ...] = (
    (vim.cluster.FailoverLevelAdmissionControlPolicy, "host-failures"),
    (vim.cluster.FailoverResourcesAdmissionControlPolicy, "resource-percentage"),
    (vim.cluster.FailoverHostAdmissionControlPolicy, "dedicated-hosts"),
)


def ha_settings(vcenter: str, cluster_moid: str, das: Any, at: str = "") -> ClusterHaSettings:
    """ClusterHaSettings from a `vim.cluster.DasConfigInfo` (None: a cluster without HA)."""
    if das is None:
        return ClusterHaSettings(vcenter=vcenter, cluster_moid=cluster_moid, observed_at=at)
    policy = das.admissionControlPolicy
    kind: HaAdmissionPolicy = ""
    if policy is not None:
        kind = next((name for cls, name in _POLICIES if isinstance(policy, cls)), "other")
    options = {o.key.lower(): str(o.value) for o in das.option or () if o.key}
    respect = options.get(HA_RESPECT_VM_ANTI_AFFINITY_OPTION.lower(), "").strip()
    return ClusterHaSettings(
        vcenter=vcenter,
        cluster_moid=cluster_moid,
        enabled=bool(das.enabled),
        admission_control_enabled=bool(das.admissionControlEnabled),
        admission_control_policy=kind,
        # The policy's own failoverLevel; the deprecated top-level one on older vCenters.
        failover_level=int(getattr(policy, "failoverLevel", 0) or das.failoverLevel or 0),
        respect_option=respect,
        respects_vm_anti_affinity=respect.lower() != "false",
        observed_at=at,
    )


class HaSettingsRecorder:
    """Keeps `ha.<vcenter>.<cluster>` true for every cluster our ownership records name."""

    def __init__(
        self,
        kv: KeyValue,
        clusters: ClusterRules,
        records: OwnershipRecords,
        vcenter: str,
        refresh_seconds: float,
    ) -> None:
        self._kv = kv
        self._clusters = clusters
        self._records = records
        self._vcenter = vcenter
        self._refresh_seconds = refresh_seconds
        self.written: dict[str, ClusterHaSettings] = {}

    async def refresh(self) -> None:
        """Read each cluster's dasConfig; write what changed, drop clusters with nothing of ours."""
        for cluster in sorted(self._records.by_cluster):
            das = await self._clusters.ha_config(cluster)
            now = utc_timestamp(datetime.now(UTC))
            settings = ha_settings(self._vcenter, cluster, das, now)
            known = self.written.get(cluster)
            if known is not None and msgspec.structs.replace(known, observed_at=now) == settings:
                continue
            await self._kv.put(drs_ha_key(self._vcenter, cluster), _encoder.encode(settings))
            self.written[cluster] = settings
            _log.info("vSphere HA of cluster %s: %s", cluster, settings)
        for cluster in sorted(set(self.written) - set(self._records.by_cluster)):
            await self._kv.delete(drs_ha_key(self._vcenter, cluster))
            del self.written[cluster]

    async def run(self) -> None:
        """Refresh until cancelled; a failed read (vCenter or NATS away) is logged and retried."""
        while True:
            try:
                await self.refresh()
            except Exception as err:  # one bad read must not stop the audit
                raise_if_cancel_requested()
                _log.warning("reading vSphere HA settings failed (%r); retrying", err)
            # A write's ack and a stop in one loop step: nats-py's wait_for (Python 3.11) kept
            # the ack and dropped the stop, and the sleep below outlasted the drain bound.
            raise_if_cancel_requested()
            await asyncio.sleep(self._refresh_seconds)
