"""Zone, region and rack labels from vSphere tags, end to end: vcsim (tags through its REST API),
a real nats-server and the Kubernetes double."""

from pathlib import Path

from pyVmomi import vim

from hostaffinity.node_labeller.config import FailureDomainSettings
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import (
    ANNOTATION_FAILURE_DOMAIN_LABELS,
    LABEL_ESXI_HOST,
    LABEL_RACK,
    LABEL_REGION,
    LABEL_ZONE,
    NodePlacement,
)
from tests.e2e.drs_harness import reconfigure
from tests.e2e.harness import default_events
from tests.e2e.labeller_harness import (
    eventually,
    host_by_name,
    labeller_config,
    node_labels,
    relocate,
    running,
    seed_nodes,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcenter_tags import VcenterTags
from tests.platform.vcsim import VcsimFactory

NODES = [f"node-{i}" for i in range(1, 7)]
# Category names of the site's own choosing, not the cloud provider's usual k8s-zone/k8s-region.
DOMAINS = FailureDomainSettings(
    zone_category="site-zone",
    region_category="site-region",
    rack_category="site-rack",
    refresh_seconds=0.5,
)


async def test_zone_region_and_rack_follow_a_vmotion_and_a_cloud_provider_value_is_kept(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc = vcsim(hosts=3, vms=6)  # node-1..6 on DC0_C0_H0, H1, H2, H0, H1, H2
    si = vc.connect()
    host = {name: host_by_name(si, name)._moId for name in ("DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2")}
    datacenter = si.content.rootFolder.childEntity[0]._moId
    tags = VcenterTags(vc)
    zone, region, rack = (tags.category(name) for name in ("site-zone", "site-region", "site-rack"))
    # A category that is not configured: its tag must not count.
    decoy = tags.category("k8s-zone")
    tags.attach(tags.tag(decoy, "not-this-one"), host["DC0_C0_H0"], "HostSystem")
    tags.attach(tags.tag(region, "eu-west"), datacenter, "Datacenter")
    zone_a, zone_b = tags.tag(zone, "zone-a"), tags.tag(zone, "zone-b")
    tags.attach(zone_a, host["DC0_C0_H0"], "HostSystem")
    tags.attach(zone_b, host["DC0_C0_H1"], "HostSystem")
    tags.attach(zone_b, host["DC0_C0_H2"], "HostSystem")
    tags.attach(tags.tag(rack, "rack-1"), host["DC0_C0_H0"], "HostSystem")
    tags.attach(tags.tag(rack, "rack-2"), host["DC0_C0_H2"], "HostSystem")

    seed_nodes(kube_double, si, NODES)
    # The cloud provider labelled node-2 with another zone, and node-3 with the same one.
    for name, value in (("node-2", "cloud-zone"), ("node-3", "zone-b")):
        node = kube_double.read("v1", "nodes", name)
        assert node is not None
        node["metadata"]["labels"][LABEL_ZONE] = value
        kube_double.write(node, manager="vsphere-cloud-controller-manager")

    config = labeller_config(vc, nats_server, kubeconfig, failure_domains=DOMAINS)
    async with running(config) as service:
        await wait_ready(service)
        first = node_labels(kube_double, "node-1")
        assert (first[LABEL_ZONE], first[LABEL_REGION], first[LABEL_RACK]) == (
            "zone-a",
            "eu-west",
            "rack-1",
        )
        # No rack tag on H1: no rack label; the region comes from the datacenter.
        second = node_labels(kube_double, "node-2")
        assert LABEL_RACK not in second
        assert second[LABEL_REGION] == "eu-west"
        # A different value someone else set is reported, not overwritten.
        assert second[LABEL_ZONE] == "cloud-zone"
        warnings = {
            (e["involvedObject"]["name"], e["reason"]) for e in await default_events(kube_double)
        }
        assert ("node-2", "FailureDomainConflict") in warnings
        # An equal value is fine: adopted, and kept true from now on.
        assert node_labels(kube_double, "node-3")[LABEL_ZONE] == "zone-b"
        assert ("node-3", "FailureDomainConflict") not in warnings
        node_3 = kube_double.read("v1", "nodes", "node-3")
        assert node_3 is not None
        assert node_3["metadata"]["annotations"][ANNOTATION_FAILURE_DOMAIN_LABELS] == (
            f"{LABEL_REGION},{LABEL_ZONE}"
        )

        # A vMotion to a host in another zone and rack: the labels follow with the host label.
        relocate(si, "node-1", "DC0_C0_H2")
        await eventually(
            lambda: node_labels(kube_double, "node-1")[LABEL_ESXI_HOST] == "DC0_C0_H2",
            "node-1 relabelled after the vMotion",
        )
        moved = node_labels(kube_double, "node-1")
        assert (moved[LABEL_ZONE], moved[LABEL_REGION], moved[LABEL_RACK]) == (
            "zone-b",
            "eu-west",
            "rack-2",
        )
        topology = await bus.topology()
        placement = await topology.get_node("node-1")
        assert isinstance(placement, NodePlacement)
        assert (placement.zone, placement.region, placement.rack) == ("zone-b", "eu-west", "rack-2")
        record = await topology.get_host(host["DC0_C0_H0"])
        assert record is not None
        assert (record.zone, record.region, record.rack) == ("zone-a", "eu-west", "rack-1")
        # node-2's conflicting value is still left as it is.
        assert node_labels(kube_double, "node-2")[LABEL_ZONE] == "cloud-zone"

        # A host tagged with another zone: the next read of the tags relabels its nodes,
        # node-3 too, whose value the labeller adopted.
        tags.detach(zone_b, host["DC0_C0_H2"], "HostSystem")
        tags.attach(tags.tag(zone, "zone-c"), host["DC0_C0_H2"], "HostSystem")
        await eventually(
            lambda: all(
                node_labels(kube_double, name)[LABEL_ZONE] == "zone-c"
                for name in ("node-1", "node-3", "node-6")
            ),
            "nodes on the retagged host relabelled",
        )
        assert node_labels(kube_double, "node-5")[LABEL_ZONE] == "zone-b"


async def test_racks_from_drs_host_groups(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    vc = vcsim(hosts=3, vms=3)
    si = vc.connect()
    group = vim.cluster.HostGroup(name="rack-r7", host=[host_by_name(si, "DC0_C0_H0")])
    spec = vim.cluster.ConfigSpecEx(groupSpec=[vim.cluster.GroupSpec(operation="add", info=group)])
    reconfigure(si, spec)
    seed_nodes(kube_double, si, NODES[:3])
    domains = FailureDomainSettings(rack_host_group_prefix="rack-")
    config = labeller_config(vc, nats_server, kubeconfig, failure_domains=domains)
    async with running(config) as service:
        await wait_ready(service)
        assert node_labels(kube_double, "node-1")[LABEL_RACK] == "r7"
        assert LABEL_RACK not in node_labels(kube_double, "node-2")
        # No zone or region category: those keys are not touched.
        assert LABEL_ZONE not in node_labels(kube_double, "node-1")


async def test_a_zone_tag_attached_to_nothing_leaves_every_other_label_following_vmotions(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """An administrator made a zone tag and attached it to nothing yet: vCenter lists it with
    `"object_ids": null`. The other tags are read, and their zones and regions follow moves."""
    vc = vcsim(hosts=3, vms=3)
    si = vc.connect()
    host = {name: host_by_name(si, name)._moId for name in ("DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2")}
    tags = VcenterTags(vc)
    zone, region = tags.category("site-zone"), tags.category("site-region")
    tags.tag(zone, "zone-planned")  # attached to nothing
    tags.tag(region, "region-planned")  # attached to nothing
    datacenter = si.content.rootFolder.childEntity[0]._moId
    tags.attach(tags.tag(region, "eu-west"), datacenter, "Datacenter")
    for name, value in (("DC0_C0_H0", "zone-a"), ("DC0_C0_H1", "zone-b"), ("DC0_C0_H2", "zone-c")):
        tags.attach(tags.tag(zone, value), host[name], "HostSystem")
    seed_nodes(kube_double, si, NODES[:3])
    config = labeller_config(vc, nats_server, kubeconfig, failure_domains=DOMAINS)
    async with running(config) as service:
        await wait_ready(service)
        await eventually(
            lambda: node_labels(kube_double, "node-1").get(LABEL_ZONE) == "zone-a",
            "zones labelled although a zone tag is attached to nothing",
        )
        assert node_labels(kube_double, "node-2")[LABEL_REGION] == "eu-west"
        relocate(si, "node-1", "DC0_C0_H2")
        await eventually(
            lambda: node_labels(kube_double, "node-1").get(LABEL_ZONE) == "zone-c",
            "node-1's zone follows its vMotion",
        )
        assert node_labels(kube_double, "node-1")[LABEL_ESXI_HOST] == "DC0_C0_H2"
        assert node_labels(kube_double, "node-1")[LABEL_REGION] == "eu-west"
