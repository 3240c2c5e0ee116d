"""The `failure_domains:` section of the node-labeller's config: which vSphere tag categories
name zones, regions and racks, or which DRS host groups name racks.

The names are those of the vSphere cloud provider's `[Labels] zone = ... / region = ...`
(kubernetes/cloud-provider-vsphere pkg/cloudprovider/vsphere/config/types_ini_legacy.go, LabelsINI;
`labels: zone/region` in its YAML config): use the same categories as the cloud provider and both
compute the same zone and region. Like the cloud provider, no category is assumed: an empty name
leaves that label alone.
"""

from hostaffinity.runtime.process.config import Seconds, Settings


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
