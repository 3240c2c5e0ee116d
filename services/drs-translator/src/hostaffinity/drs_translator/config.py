"""The drs-translator's configuration record (YAML + HOSTAFFINITY_* environment)."""

from collections.abc import Mapping
from typing import ClassVar

from hostaffinity.runtime.process.config import Delay, Seconds, Settings, moved_into
from hostaffinity.runtime.vcenter.settings import ONE_VCENTER_KEYS, VCenterServiceSettings


class HaAuditSettings(Settings, frozen=True):
    """Reading vSphere HA's settings of the clusters holding our rules, for the CLI's HA audit
    (`hostaffinity status`, `explain`, `what-if host-failure`)."""

    # Read the HA settings (dasConfig) of each cluster holding our rules into hostaffinity-drs.
    enabled: bool = True
    # How often: an administrator's change to HA is seen within this.
    refresh_seconds: Seconds = 60.0


class FleetRuleSettings(Settings, frozen=True):
    """Fleet groups' DRS rules (docs/fleet-groups.md): one per group and vSphere cluster over
    every install's members, written only by the install holding its lease on the fleet hub.
    Only an install in a fleet (`nats.fleet_install`) takes leases; a dry run takes none."""

    # A request to the hub not answered within this counts as the hub being away.
    request_timeout_seconds: Seconds = 2.0


class DrsSettings(Settings, frozen=True):
    """What the drs-translator sends to vCenter, and how often."""

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
    # Read a cluster's rules at least this often, so that other installs' rules on the same
    # hosts (another Kubernetes cluster's hostaffinity) are judged as they are now; a host
    # entering maintenance reads it at once.
    shared_rules_refresh_seconds: Seconds = 30.0
    # A change vCenter refused is retried after this, doubling up to the maximum.
    retry_base_seconds: Seconds = 2.0
    retry_max_seconds: Seconds = 300.0
    # Pause after a failed cycle of one vCenter (it or NATS unreachable) before its next; the
    # other vCenters go on meanwhile.
    error_retry_seconds: Seconds = 5.0


class DrsTranslatorConfig(VCenterServiceSettings, frozen=True, kw_only=True):
    """Everything the drs-translator reads: the shared sections, `vcenters` (named as the
    node-labeller names them; no defaults for host and credentials), its own `drs` section, the
    HA audit's `ha_audit` and the fleet rules' `fleet`."""

    drs: DrsSettings = DrsSettings()
    ha_audit: HaAuditSettings = HaAuditSettings()
    fleet: FleetRuleSettings = FleetRuleSettings()

    MOVED_KEYS: ClassVar[Mapping[str, str]] = {
        **ONE_VCENTER_KEYS,
        **moved_into("drs", DrsSettings),
    }
