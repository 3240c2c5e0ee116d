"""The filter refuses a fleet group member the nodes on hosts holding another member of its group,
this cluster's or another's; a pod of no group, or of another group, is not concerned.

node1 and node2 run on host1, node3 on host2, node5 on host3, node4's host is unknown."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.model import ObjectMeta, Pod, PodSpec
from hostaffinity.scheduler_extender.core import answers
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.core.extender_v1 import AskedNodes
from hostaffinity.scheduler_extender.core.fleet_filter import REASON
from hostaffinity.schema import LABEL_FLEET_GROUP, ReplicaPlacement, WorkloadPlacement

CacheFactory = Callable[..., ExtenderCache]
HOSTS: dict[str, str | None] = {
    "node1": "host1",
    "node2": "host1",
    "node3": "host2",
    "node4": None,
    "node5": "host3",
}
ASKED = ["node1", "node2", "node3", "node5"]


def member(name: str, node: str = "", group: str | None = "db") -> Pod:
    labels = {"app": name} if group is None else {"app": name, LABEL_FLEET_GROUP: group}
    meta = ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", labels=labels)
    return Pod(metadata=meta, spec=PodSpec(node_name=node))


def elsewhere(cluster: str, host: str, group: str = "db") -> WorkloadPlacement:
    return WorkloadPlacement(
        cluster=cluster,
        namespace="shop",
        kind="StatefulSet",
        name="db",
        fleet_group=group,
        replicas=[ReplicaPlacement(pod="db-0", host_name=host, host_id=f"uuid/{host}")],
    )


def cache_with(
    make_cache: CacheFactory, pods: list[Pod], others: list[WorkloadPlacement]
) -> ExtenderCache:
    fleet = FleetMembers("me")
    for summary in others:
        fleet.put(f"{summary.cluster}.workload.shop.StatefulSet.db", summary)
    return make_cache(HOSTS, pods, fleet=fleet)


@pytest.mark.parametrize(
    ("existing", "others", "incoming", "passed"),
    [
        pytest.param([], [elsewhere("east", "host1")], member("db-1"), ["node3", "node5"],
                     id="another cluster's member on host1"),
        pytest.param([member("db-0", "node3")], [], member("db-1"), ["node1", "node2", "node5"],
                     id="this cluster's member on host2"),
        pytest.param([member("db-0", "node3")], [elsewhere("east", "host1")], member("db-1"),
                     ["node5"], id="both"),
        pytest.param([], [elsewhere("east", "host1", group="web")], member("db-1"), ASKED,
                     id="another group's member"),
        pytest.param([], [elsewhere("east", "host1")], member("x", group=None), ASKED,
                     id="a pod of no group"),
        pytest.param([member("db-0", "node3")], [elsewhere("east", "host1"),
                     elsewhere("west", "host3")], member("db-1"), [], id="no host left"),
    ],
)  # fmt: skip
def test_fleet_members_are_kept_off_the_hosts_of_their_group(
    make_cache: CacheFactory,
    existing: list[Pod],
    others: list[WorkloadPlacement],
    incoming: Pod,
    passed: list[str],
) -> None:
    answer, verdict = answers.filter_nodes(
        cache_with(make_cache, existing, others), incoming, AskedNodes(ASKED, None)
    )
    refused = {n for n, why in answer.failed_nodes.items() if why.startswith(REASON)}
    if passed and incoming.metadata.labels.get(LABEL_FLEET_GROUP):
        # a concerned pod is held on one host of those that passed (the burst case)
        assert answer.node_names is not None
        assert set(answer.node_names) <= set(passed)
        assert answer.node_names
    else:
        assert answer.node_names == passed
    assert refused == set(ASKED) - set(passed)
    assert verdict.rejections.get(REASON, 0) == len(refused)


def test_the_refusal_names_the_members_and_nothing_left_is_summed_up(
    make_cache: CacheFactory,
) -> None:
    cache = cache_with(
        make_cache,
        [member("db-0", "node3")],
        [elsewhere("east", "host1"), elsewhere("west", "host3")],
    )
    answer, verdict = answers.filter_nodes(cache, member("db-1"), AskedNodes(ASKED, None))
    assert answer.failed_nodes["node1"] == (
        f"{REASON}: ESXi host host1 holds shop/db-0 of cluster east of fleet group db"
    )
    assert answer.failed_nodes["node3"].endswith(
        "ESXi host host2 holds default/db-0 of fleet group db"
    )
    assert verdict.outcome == answers.UNSCHEDULABLE
    assert verdict.message == f"0/4 nodes are available: 4 {REASON}."


def test_a_member_in_flight_holds_its_host_for_the_next_one(make_cache: CacheFactory) -> None:
    """Two members created at once: the second is filtered before the first is bound."""
    cache = cache_with(make_cache, [], [])
    first, _ = answers.filter_nodes(cache, member("db-0"), AskedNodes(ASKED, None))
    assert first.node_names
    taken = HOSTS[first.node_names[0]]
    second, _ = answers.filter_nodes(cache, member("db-1"), AskedNodes(ASKED, None))
    assert second.node_names
    assert all(HOSTS[n] != taken for n in second.node_names)
