"""Failure domains from tags: the cloud provider's precedence, racks, and who owns a zone label."""

import msgspec
import pytest

from hostaffinity.node_labeller.config import FailureDomainSettings
from hostaffinity.node_labeller.core.failure_domains import (
    Conflict,
    FailureDomains,
    TagIndex,
    host_failure_domains,
    plan_shared_labels,
)
from hostaffinity.node_labeller.core.nodes import Node, NodeMeta
from hostaffinity.node_labeller.core.reconcile import PlannerSettings, Tags, reconcile_node
from hostaffinity.schema import (
    ANNOTATION_FAILURE_DOMAIN_LABELS,
    LABEL_RACK,
    LABEL_REGION,
    LABEL_ZONE,
    EventFactory,
    label_value,
)
from tests.platform.builders.node_labeller import inventory_with

EVENTS = EventFactory("node-labeller")

DOMAINS = FailureDomainSettings(
    zone_category="k8s-zone", region_category="k8s-region", rack_category="rack"
)
# host-1 → domain-c7 (cluster) → group-h4 (host folder) → datacenter-1 → group-d1 (root folder)
VCENTER = "vc-1"
INVENTORY = inventory_with(("vm-1", "node-1", "4203aaaa-0000-0000-0000-000000000001", "host-1"))


def domains(tags: TagIndex, settings: FailureDomainSettings = DOMAINS) -> FailureDomains:
    return host_failure_domains("host-1", INVENTORY, tags, settings)


@pytest.mark.parametrize(
    ("tags", "zone", "region"),
    [
        pytest.param(
            {"host-1": {"k8s-zone": ["a"]}, "datacenter-1": {"k8s-region": ["eu"]}},
            "a",
            "eu",
            id="zone-on-host-region-on-datacenter",
        ),
        pytest.param(
            {"domain-c7": {"k8s-zone": ["a"], "k8s-region": ["eu"]}, "host-1": {}},
            "a",
            "eu",
            id="both-on-the-cluster",
        ),
        pytest.param(
            # The cloud provider walks on until both are known: the cluster's zone replaces the
            # host's, as it does (connectionmanager/zones.go, LookupZoneByMoref).
            {
                "host-1": {"k8s-zone": ["near"]},
                "domain-c7": {"k8s-zone": ["far"]},
                "datacenter-1": {"k8s-region": ["eu"]},
            },
            "far",
            "eu",
            id="farther-zone-replaces-until-both-known",
        ),
        pytest.param(
            # ... and stops once both are: the datacenter's zone is never looked at.
            {
                "host-1": {"k8s-zone": ["near"], "k8s-region": ["eu"]},
                "datacenter-1": {"k8s-zone": ["far"]},
            },
            "near",
            "eu",
            id="stops-once-both-known",
        ),
        pytest.param({"group-d1": {"k8s-zone": ["root"]}}, "root", "", id="root-folder-counts"),
        pytest.param({"host-1": {"other": ["x"]}}, "", "", id="other-categories-ignored"),
        pytest.param(
            {"host-1": {"k8s-zone": ["Zone A (east)"]}},
            label_value("Zone A (east)"),
            "",
            id="names-become-label-values",
        ),
    ],
)
def test_zone_and_region_as_the_cloud_provider_computes_them(
    tags: TagIndex, zone: str, region: str
) -> None:
    found = domains(tags)
    assert (found.zone, found.region) == (zone, region)


def test_several_tags_of_a_category_on_one_object_give_no_value_and_say_so() -> None:
    found = domains({"host-1": {"k8s-zone": ["a", "b"]}, "datacenter-1": {"k8s-region": ["eu"]}})
    assert (found.zone, found.region) == ("", "eu")
    assert found.ambiguities == ("host-1 carries 2 tags of category 'k8s-zone' (a, b)",)


def test_the_rack_is_the_nearest_tagged_object() -> None:
    tags = {"host-1": {"rack": ["r12"]}, "domain-c7": {"rack": ["r1"]}}
    assert domains(tags).rack == "r12"
    assert domains({"domain-c7": {"rack": ["r1"]}}).rack == "r1"
    assert domains(tags, FailureDomainSettings(zone_category="k8s-zone")).rack == ""


OWNED = {ANNOTATION_FAILURE_DOMAIN_LABELS: LABEL_ZONE}
BOTH = (LABEL_ZONE, LABEL_REGION)


@pytest.mark.parametrize(
    ("labels", "annotations", "desired", "writes", "owned", "conflicts"),
    [
        pytest.param({}, {}, {LABEL_ZONE: "a"}, {LABEL_ZONE: "a"}, LABEL_ZONE, [], id="absent-set"),
        pytest.param(
            {LABEL_ZONE: "a"}, {}, {LABEL_ZONE: "a"}, {}, LABEL_ZONE, [], id="equal-adopted"
        ),
        pytest.param(
            {LABEL_ZONE: "a"},
            OWNED,
            {LABEL_ZONE: "b"},
            {LABEL_ZONE: "b"},
            None,
            [],
            id="ours-moves",
        ),
        pytest.param(
            {LABEL_ZONE: "cpi"},
            {},
            {LABEL_ZONE: "b"},
            {},
            None,
            [Conflict(LABEL_ZONE, "cpi", "b")],
            id="theirs-differs-conflict",
        ),
        pytest.param({LABEL_ZONE: "cpi"}, {}, {}, {}, None, [], id="theirs-and-no-tag-left-alone"),
        pytest.param({LABEL_ZONE: "a"}, OWNED, {}, {LABEL_ZONE: None}, "", [], id="ours-untagged"),
    ],
)
def test_who_may_write_a_shared_key(
    labels: dict[str, str],
    annotations: dict[str, str],
    desired: dict[str, str],
    writes: dict[str, str | None],
    owned: str | None,
    conflicts: list[Conflict],
) -> None:
    plan = plan_shared_labels(labels, annotations, desired, BOTH)
    assert (plan.labels, plan.owned_annotation, plan.conflicts) == (writes, owned, conflicts)


def test_a_key_no_longer_configured_is_removed_only_where_ours() -> None:
    labels = {LABEL_ZONE: "a", LABEL_REGION: "eu"}
    owned = {ANNOTATION_FAILURE_DOMAIN_LABELS: LABEL_ZONE}
    plan = plan_shared_labels(labels, owned, {LABEL_REGION: "eu"}, (LABEL_REGION,))
    assert plan.labels == {LABEL_ZONE: None}
    assert plan.owned_annotation == LABEL_REGION


def test_unread_tags_leave_the_failure_domain_labels_alone() -> None:
    settings = PlannerSettings(failure_domains=DOMAINS)
    labelled = Node(
        metadata=NodeMeta(
            name="node-1",
            labels={LABEL_ZONE: "a", LABEL_RACK: "r1"},
            annotations={ANNOTATION_FAILURE_DOMAIN_LABELS: LABEL_ZONE},
        )
    )
    unread = reconcile_node(
        labelled, {VCENTER: INVENTORY}, None, settings, now="t", version=1, events=EVENTS
    )
    assert unread.label_patch is not None
    assert LABEL_ZONE not in unread.label_patch["labels"]
    assert LABEL_RACK not in unread.label_patch["labels"]
    untagged = reconcile_node(
        labelled,
        {VCENTER: INVENTORY},
        None,
        settings,
        now="t",
        version=1,
        events=EVENTS,
        tags={VCENTER: Tags({})},
    )
    assert untagged.label_patch is not None
    assert untagged.label_patch["labels"][LABEL_ZONE] is None
    assert untagged.label_patch["labels"][LABEL_RACK] is None


def test_a_rack_host_group_names_the_rack_where_no_rack_tag_does() -> None:
    by_group = FailureDomainSettings(rack_category="rack", rack_host_group_prefix="rack-")
    assert host_failure_domains("host-1", INVENTORY, {}, by_group, ("r7",)).rack == "r7"
    tagged = {"domain-c7": {"rack": ["r1"]}}
    assert host_failure_domains("host-1", INVENTORY, tagged, by_group, ("r7",)).rack == "r1"
    two = host_failure_domains("host-1", INVENTORY, {}, by_group, ("r7", "r8"))
    assert two.rack == ""
    assert two.ambiguities == ("host-1 is in 2 rack host groups (rack-r7, rack-r8)",)


def test_unread_tags_keep_the_stored_domains_of_the_same_host() -> None:
    settings = PlannerSettings(failure_domains=DOMAINS)
    subject = Node(metadata=NodeMeta(name="node-1"))
    known = reconcile_node(
        subject, {VCENTER: INVENTORY}, None, settings, now="t", version=1, events=EVENTS,
        tags={VCENTER: Tags({"host-1": {"k8s-zone": ["a"]}})},
    )  # fmt: skip
    assert known.placement is not None
    assert known.placement.zone == "a"
    unread = reconcile_node(
        subject, {VCENTER: INVENTORY}, known.placement, settings, now="t", version=2, events=EVENTS
    )
    assert unread.placement is None  # nothing to rewrite: same host, same domains
    moved = msgspec.structs.replace(known.placement, host_moid="host-2")
    elsewhere = reconcile_node(
        subject, {VCENTER: INVENTORY}, moved, settings, now="t", version=2, events=EVENTS
    )
    assert elsewhere.placement is not None
    assert elsewhere.placement.zone == ""
