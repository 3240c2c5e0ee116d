"""The drs-translator's configuration record (YAML + HOSTAFFINITY_* environment)."""

from hostaffinity.runtime.process.config import Delay, LeaderElectedSettings, Seconds, Settings
from hostaffinity.runtime.vcenter.session import VCenterSettings


class HaAuditSettings(Settings, frozen=True):
    """Reading vSphere HA's settings of the clusters holding our rules, for the CLI's HA audit
    (`hostaffinity status`, `explain`, `what-if host-failure`)."""

    # Read the HA settings (dasConfig) of each cluster holding our rules into hostaffinity-drs.
    enabled: bool = True
    # How often: an administrator's change to HA is seen within this.
    refresh_seconds: Seconds = 60.0


class DrsTranslatorConfig(LeaderElectedSettings, frozen=True, kw_only=True):
    """Everything the drs-translator reads; `vcenter` has no defaults for host and credentials."""

    vcenter: VCenterSettings
    # The vCenter's name in placements and records: the node-labeller's `vcenter_name`
    # (defaults, as there, to the vCenter's host).
    vcenter_name: str = ""
    # Plan, log and publish `drs.rules.applied` with dry_run=true; write nothing anywhere.
    dry_run: bool = False
    # VM-Host rules as "must" (DRS and HA never break them). "should" by default.
    vm_host_mandatory: bool = False
    # Also translate preferred host anti-affinity (into the anti-affinity cliques) and preferred
    # node affinity on hosts (a "should" VM-Host rule), whatever their weight; never preferred
    # pod affinity (docs/services/drs-translator.md). Off by default: DRS rules have no weight.
    translate_preferred: bool = False
    # Changes arriving within this window are planned and sent together (one reconfigure per
    # cluster).
    debounce_seconds: Delay = 0.2
    # Read every cluster from vCenter again and repair drift this often.
    resync_seconds: Seconds = 300.0
    # A change vCenter refused is retried after this, doubling up to the maximum.
    retry_base_seconds: Seconds = 2.0
    retry_max_seconds: Seconds = 300.0
    # Pause after a failed cycle (vCenter or NATS unreachable) before the next.
    error_retry_seconds: Seconds = 5.0
    ha_audit: HaAuditSettings = HaAuditSettings()

    @property
    def vcenter_label(self) -> str:
        return self.vcenter_name or self.vcenter.host
