"""read_tags against vcsim's Automation (REST) API: what it returns, and how it fails."""

import pytest

from hostaffinity.runtime.vcenter.tags import TagReadError, read_tags
from tests.platform.vcenter_tags import VcenterTags
from tests.platform.vcsim import VcsimFactory


async def test_reads_only_the_asked_categories_and_names_the_missing_ones(
    vcsim: VcsimFactory,
) -> None:
    vc = vcsim(hosts=2, vms=0)
    tags = VcenterTags(vc)
    zone, other = tags.category("k8s-zone"), tags.category("backup-policy")
    zone_a = tags.tag(zone, "zone-a")
    tags.attach(zone_a, "host-21", "HostSystem")
    tags.attach(zone_a, "domain-c7", "ClusterComputeResource")
    tags.attach(tags.tag(zone, "zone-b"), "host-21", "HostSystem")
    tags.attach(tags.tag(other, "gold"), "host-21", "HostSystem")
    read = await read_tags(vc.settings(), ["k8s-zone", "k8s-region"])
    assert read.tags == {
        "host-21": {"k8s-zone": ("zone-a", "zone-b")},
        "domain-c7": {"k8s-zone": ("zone-a",)},
    }
    assert read.missing_categories == ("k8s-region",)


async def test_an_unreachable_vcenter_is_a_tag_read_error_naming_it(vcsim: VcsimFactory) -> None:
    vc = vcsim(hosts=1, vms=0)
    settings = vc.settings(port=1)
    with pytest.raises(TagReadError, match=r"vCenter http://127\.0\.0\.1:1: tag API login failed"):
        await read_tags(settings, ["k8s-zone"], timeout_seconds=5)
