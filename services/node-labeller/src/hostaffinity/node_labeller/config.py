"""The node-labeller's configuration record (YAML + HOSTAFFINITY_* environment)."""

from collections.abc import Mapping
from typing import ClassVar, Literal

from hostaffinity.node_labeller.core.failure_domain_settings import FailureDomainSettings
from hostaffinity.runtime.process.config import Count, Seconds, Settings
from hostaffinity.runtime.vcenter.session import (
    ONE_VCENTER_KEYS,
    VCenterServiceSettings,
    moved_into,
)


class LabellerSettings(Settings, frozen=True):
    """How the node-labeller matches nodes to VMs, patches labels and repairs what drifted."""

    # How to match a node whose providerID and systemUUID name no VM: by VM name, by the guest's
    # hostname, or not at all.
    match_fallback: Literal["vm-name", "guest-hostname", "none"] = "vm-name"
    # Label patches in flight at once during a full resync (first labelling, re-login).
    patch_concurrency: Count = 32
    # Every this often, every vCenter's inventory is read whole and compared with the topology
    # KV and the node labels; whatever differs (garbage or false KV values, keys of deleted
    # nodes) is rewritten.
    resync_seconds: Seconds = 120.0
    # A node whose KV write, label patch or event publish failed is retried after
    # base * 2**failures seconds, at most max, until it succeeds or its desired state changes.
    retry_base_seconds: Seconds = 0.05
    retry_max_seconds: Seconds = 10.0


class NodeLabellerConfig(VCenterServiceSettings, frozen=True, kw_only=True):
    """Everything the node-labeller reads: the shared sections, `vcenters` (no defaults for
    host and credentials), its own `labeller` section and `failure_domains`."""

    labeller: LabellerSettings = LabellerSettings()
    # Zone, region and rack labels from vSphere tags (off until a category is named).
    failure_domains: FailureDomainSettings = FailureDomainSettings()

    MOVED_KEYS: ClassVar[Mapping[str, str]] = {
        **ONE_VCENTER_KEYS,
        **moved_into("labeller", LabellerSettings),
    }
