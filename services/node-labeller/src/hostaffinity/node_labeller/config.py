"""The node-labeller's configuration record (YAML + HOSTAFFINITY_* environment).

A leaf: it imports no module of the node-labeller, whose core and shell both take their settings
from it (.importlinter).
"""

from collections.abc import Mapping
from typing import ClassVar, Literal

from hostaffinity.runtime.process.config import Count, Seconds, Settings, moved_into
from hostaffinity.runtime.vcenter.settings import ONE_VCENTER_KEYS, VCenterServiceSettings


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


# The `failure_domains:` section. Its names are those of the vSphere cloud provider's
# `[Labels] zone = ... / region = ...` (kubernetes/cloud-provider-vsphere
# pkg/cloudprovider/vsphere/config/types_ini_legacy.go, LabelsINI; `labels: zone/region` in its
# YAML config): use the same categories as the cloud provider and both compute the same zone and
# region. Like the cloud provider, no category is assumed: an empty name leaves that label alone.
class FailureDomainSettings(Settings, frozen=True):
    """Tag categories of zones, regions and racks (or host groups for racks); every empty
    setting turns its label off."""

    # The tag category whose tags name zones (`topology.kubernetes.io/zone`), e.g. "k8s-zone".
    zone_category: str = ""
    # The tag category whose tags name regions (`topology.kubernetes.io/region`), e.g. "k8s-region".
    region_category: str = ""
    # The tag category whose tags name racks (`hostaffinity.io/rack`): a level between the ESXi
    # host and the zone. The nearest tagged object wins: the host, then its cluster, folders and
    # datacenter.
    rack_category: str = ""
    # Or racks from DRS host groups: a host in a group named <prefix><rack> is in that rack (with
    # "rack-", the group rack-r12 makes r12). A rack tag, where one is found, comes first.
    rack_host_group_prefix: str = ""
    # Tags change rarely and a vMotion changes only the host, whose domains are known already:
    # vCenter's tags and tag associations (and host groups) are read again this often.
    refresh_seconds: Seconds = 120.0

    @property
    def enabled(self) -> bool:
        """Some category is configured, so vCenter's tags are read."""
        return bool(self.categories or self.rack_host_group_prefix)

    @property
    def categories(self) -> list[str]:
        """The tag categories to read, in zone, region, rack order."""
        return [c for c in (self.zone_category, self.region_category, self.rack_category) if c]


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
