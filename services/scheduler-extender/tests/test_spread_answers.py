"""The extender decides topology spreads over ESXi hosts as the engine does (PHYSICAL mode).

Hosts as in test_answers.py: node1 and node2 on host1, node3 on host2, node4's host unknown.
"""

from __future__ import annotations

from collections.abc import Callable

from hostaffinity.affinity.model import (
    LabelSelector,
    ObjectMeta,
    Pod,
    PodSpec,
    TopologySpreadConstraint,
)
from hostaffinity.scheduler_extender.core import answers
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.core.extender_v1 import AskedNodes
from hostaffinity.schema import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY

CacheFactory = Callable[..., ExtenderCache]  # the `make_cache` fixture (conftest.py)
HOSTS: dict[str, str | None] = {"node1": "host1", "node2": "host1", "node3": "host2", "node4": None}
ALL = ["node1", "node2", "node3", "node4"]
SPREAD = "node(s) didn't match pod topology spread constraints"
UNPLACED = "node(s) had no known ESXi host"


def replica(
    name: str,
    node: str = "",
    *,
    key: str = LABEL_ESXI_HOST,
    when: str = "DoNotSchedule",
    opted_in: bool = False,
) -> Pod:
    """A replica of app=web spreading itself with maxSkew 1 over `key`."""
    spread = TopologySpreadConstraint(
        max_skew=1,
        topology_key=key,
        when_unsatisfiable=when,
        label_selector=LabelSelector(match_labels={"app": "web"}),
    )
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"} if opted_in else {}
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            labels={"app": "web"},
            annotations=annotations,
        ),
        spec=PodSpec(node_name=node, topology_spread_constraints=[spread]),
    )


def reasons(messages: dict[str, str]) -> dict[str, str]:
    return {node: message.split(": ", 1)[0] for node, message in messages.items()}


def test_a_host_spread_refuses_the_host_that_already_holds_a_replica(
    make_cache: CacheFactory,
) -> None:
    cache = make_cache(HOSTS, [replica("web-1", "node1")])
    answer, verdict = answers.filter_nodes(cache, replica("web-2"), AskedNodes(ALL, None))
    assert answer.node_names == ["node3"]
    assert reasons(answer.failed_nodes) == {"node1": SPREAD, "node2": SPREAD}
    assert reasons(answer.failed_and_unresolvable_nodes) == {"node4": UNPLACED}
    assert (
        "hostaffinity.io/esxi-host=host1 would hold the pod itself and 1 matching pod"
        in (answer.failed_nodes["node2"])
    )
    assert verdict.rejections == {SPREAD: 2, UNPLACED: 1}


def test_a_hostname_spread_is_host_level_only_for_an_opted_in_pod(
    make_cache: CacheFactory,
) -> None:
    cache = make_cache(HOSTS, [replica("web-1", "node1")])
    plain = replica("web-2", key="kubernetes.io/hostname")
    answer, _ = answers.filter_nodes(cache, plain, AskedNodes(ALL, None))
    assert answer.node_names == ALL  # kube-scheduler's own PodTopologySpread decides it
    opted = replica("web-2", key="kubernetes.io/hostname", opted_in=True)
    answer, _ = answers.filter_nodes(cache, opted, AskedNodes(ALL, None))
    assert answer.node_names == ["node3"]


def test_replicas_filtered_before_either_is_bound_land_on_different_hosts(
    make_cache: CacheFactory,
) -> None:
    cache = make_cache(HOSTS)
    first, second = replica("web-1"), replica("web-2")
    cache.note_incoming(first)
    cache.note_incoming(second)
    assert answers.in_flight_selected(cache, first) == ["default/web-2"]
    held, _ = answers.filter_nodes(cache, first, AskedNodes(["node1", "node2", "node3"], None))
    assert held.node_names is not None
    assert answers.in_flight_selected(cache, second) == []  # web-1 is reserved now
    answer, _ = answers.filter_nodes(cache, second, AskedNodes(["node1", "node2", "node3"], None))
    assert answer.node_names is not None
    host_of = {name: cache.host_of(name) for name in ("node1", "node2", "node3")}
    assert {host_of[n] for n in held.node_names}.isdisjoint(host_of[n] for n in answer.node_names)


def test_a_soft_host_spread_ranks_the_empty_host_first(make_cache: CacheFactory) -> None:
    cache = make_cache(HOSTS, [replica("web-1", "node1", when="ScheduleAnyway")])
    incoming = replica("web-2", when="ScheduleAnyway")
    answer, _ = answers.filter_nodes(cache, incoming, AskedNodes(ALL, None))
    assert answer.node_names == ALL  # ScheduleAnyway never filters
    priorities, _ = answers.prioritize(cache, incoming, AskedNodes(ALL, None))
    assert priorities is not None
    # The mean of the spread's score (host2 100, host1 0, node4 unscored) and the owner
    # spread, which is neutral for a pod without a controller.
    assert {p.host: p.score for p in priorities} == {
        "node1": 5,
        "node2": 5,
        "node3": 10,
        "node4": 5,
    }
