"""The `failure_domains:` section of the node-labeller's config: which vSphere tag categories
name zones, regions and racks.

The names are those of the vSphere cloud provider's `[Labels] zone = ... / region = ...`
(kubernetes/cloud-provider-vsphere pkg/cloudprovider/vsphere/config/types_ini_legacy.go, LabelsINI;
`labels: zone/region` in its YAML config): use the same categories as the cloud provider and both
compute the same zone and region. Like the cloud provider, no category is assumed: an empty name
leaves that label alone.
"""

from hostaffinity.runtime.config import Seconds, Settings


class FailureDomainSettings(Settings, frozen=True):
    """Tag categories of zones, regions and racks; every empty name turns its label off."""

    # The tag category whose tags name zones (`topology.kubernetes.io/zone`), e.g. "k8s-zone".
    zone_category: str = ""
    # The tag category whose tags name regions (`topology.kubernetes.io/region`), e.g. "k8s-region".
    region_category: str = ""
    # The tag category whose tags name racks (`hostaffinity.io/rack`): a level between the ESXi
    # host and the zone. The nearest tagged object wins: the host, then its cluster, folders and
    # datacenter.
    rack_category: str = ""
    # Tags change rarely and a vMotion changes only the host, whose domains are known already:
    # vCenter's tags and tag associations are read again this often.
    refresh_seconds: Seconds = 120.0

    @property
    def enabled(self) -> bool:
        """Some category is configured, so vCenter's tags are read."""
        return bool(self.zone_category or self.region_category or self.rack_category)
