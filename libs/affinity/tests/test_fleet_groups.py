"""Fleet groups: other installs' members as the fleet view places them, and which member of a
pile stays (the same answer from every install)."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostaffinity.affinity.fleet_groups import (
    FleetMembers,
    fleet_group,
    own_members,
    stay_rank,
    stayer,
)
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Node, NodeSpec, ObjectMeta, Pod, PodSpec
from hostaffinity.schema import (
    LABEL_FLEET_GROUP,
    ReplicaPlacement,
    WorkloadPlacement,
    label_value,
)


def placement(
    cluster: str, group: str, *replicas: tuple[str, str], namespace: str = "shop"
) -> WorkloadPlacement:
    """A workload of `cluster` whose replicas (pod, host name; "" = not placed) are in `group`."""
    return WorkloadPlacement(
        cluster=cluster,
        namespace=namespace,
        kind="Deployment",
        name="web",
        fleet_group=group,
        replicas=[
            ReplicaPlacement(pod=pod, host_name=host, host_id=f"vc-uuid/{host}" if host else "")
            for pod, host in replicas
        ],
    )


def positions(members: FleetMembers, group: str) -> dict[str, list[str]]:
    return {host: sorted(m.describe() for m in on) for host, on in members.on_hosts(group).items()}


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        pytest.param(
            {"east.workload.shop.Deployment.web": placement("east", "web", ("web-1", "esx-1"))},
            {"esx-1": ["shop/web-1 of cluster east"]},
            id="another install's member, by host",
        ),
        pytest.param(
            {"me.workload.shop.Deployment.web": placement("me", "web", ("web-1", "esx-1"))},
            {},
            id="this install's own members are known live, never from the view",
        ),
        pytest.param(
            {"east.workload.shop.Deployment.web": placement("east", "", ("web-1", "esx-1"))},
            {},
            id="a workload in no group",
        ),
        pytest.param(
            {"east.workload.shop.Deployment.web": placement("east", "web", ("web-1", ""))},
            {},
            id="a replica not placed yet",
        ),
        pytest.param(
            {
                "east.workload.shop.Deployment.web": placement(
                    "east", "web", ("web-1", "esx-1"), ("web-2", "ESX 2.lab")
                ),
                "west.workload.shop.Deployment.web": placement("west", "web", ("web-1", "esx-1")),
            },
            {
                "esx-1": ["shop/web-1 of cluster east", "shop/web-1 of cluster west"],
                label_value("ESX 2.lab"): ["shop/web-2 of cluster east"],
            },
            id="two installs' members on one host; a host name read as its label value",
        ),
    ],
)
def test_the_fleet_view_places_other_installs_members(
    view: dict[str, WorkloadPlacement], expected: dict[str, list[str]]
) -> None:
    members = FleetMembers("me")
    members.replace(view)
    assert positions(members, "web") == expected


def test_only_a_change_of_members_counts_as_one() -> None:
    members = FleetMembers("me")
    key = "east.workload.shop.Deployment.web"
    first = placement("east", "web", ("web-1", "esx-1"))
    assert members.put(key, first)
    assert not members.put(key, first)  # republished unchanged
    own = placement("me", "web", ("web-1", "esx-1"))
    assert not members.put("me.workload.shop.Deployment.web", own)  # our own: left out
    assert members.put(key, placement("east", "web", ("web-1", "esx-2")))  # a vMotion
    assert positions(members, "web") == {"esx-2": ["shop/web-1 of cluster east"]}
    assert members.put(key, placement("east", "db", ("web-1", "esx-2")))  # relabelled
    assert members.groups() == ["db"]
    assert members.put(key, None)
    assert members.groups() == []
    assert not members.put(key, None)


def test_a_replay_forgets_what_it_no_longer_holds() -> None:
    members = FleetMembers("me")
    members.replace(
        {
            "east.workload.a.Deployment.web": placement("east", "web", ("web-1", "esx-1")),
            "west.workload.a.Deployment.web": placement("west", "web", ("web-1", "esx-2")),
        }
    )
    assert members.replace(
        {"west.workload.a.Deployment.web": placement("west", "web", ("web-1", "esx-2"))}
    )
    assert positions(members, "web") == {"esx-2": ["shop/web-1 of cluster west"]}


@given(
    st.lists(
        st.tuples(st.sampled_from(["east", "west", "north"]), st.text(min_size=1, max_size=20)),
        min_size=2,
        max_size=6,
        unique=True,
    )
)
def test_every_install_finds_the_same_stayer_whatever_the_order(
    members: list[tuple[str, str]],
) -> None:
    """Each install lists the pile in its own order; they all agree on who stays."""
    answers = {stayer("web", order) for order in itertools.permutations(members[:4])}
    assert len(answers) == 1


def test_the_stayer_is_not_always_the_same_cluster_s() -> None:
    """A hash, not an order of names: across piles, both clusters keep some of their pods."""
    kept = {stayer("web", [("east", f"shop/web-{i}"), ("west", f"shop/web-{i}")])[0]
            for i in range(20)}  # fmt: skip
    assert kept == {"east", "west"}


def test_a_rank_depends_on_the_group_the_cluster_and_the_pod() -> None:
    base = stay_rank("web", "east", "shop/web-1")
    assert base != stay_rank("db", "east", "shop/web-1")
    assert base != stay_rank("web", "west", "shop/web-1")
    assert base != stay_rank("web", "east", "shop/web-2")


def _pod(name: str, node: str, labels: dict[str, str], *, terminating: bool = False) -> Pod:
    meta = ObjectMeta(
        name=name,
        namespace="shop",
        labels=labels,
        deletion_timestamp="2026-01-01T00:00:00Z" if terminating else None,
    )
    return Pod(metadata=meta, spec=PodSpec(node_name=node))


def test_own_members_are_the_placed_labelled_pods_that_are_not_leaving() -> None:
    index = ClusterIndex()
    index.upsert_node(Node(metadata=ObjectMeta(name="n1"), spec=NodeSpec()))
    index.upsert_pod(_pod("a", "n1", {LABEL_FLEET_GROUP: "web"}))
    index.upsert_pod(_pod("b", "n1", {LABEL_FLEET_GROUP: "db"}))
    index.upsert_pod(_pod("c", "n1", {LABEL_FLEET_GROUP: "web"}, terminating=True))
    index.upsert_pod(_pod("d", "n1", {"app": "web"}))
    assert sorted(r.key for r in own_members(index)) == ["shop/a", "shop/b"]
    assert [r.key for r in own_members(index, "web")] == ["shop/a"]
    assert fleet_group({LABEL_FLEET_GROUP: ""}) is None
    assert fleet_group({LABEL_FLEET_GROUP: "web"}) == "web"
