"""Filter and prioritize decisions, table-driven over the seed-004 topology.

node1 and node2 run on host1, node3 on host2, node4's host is unknown; p1 (app=db) runs on node1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hostaffinity.affinity.model import (
    Affinity,
    LabelSelector,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    WeightedPodAffinityTerm,
)
from hostaffinity.scheduler_extender.core import answers
from hostaffinity.scheduler_extender.core.cache import ExtenderCache
from hostaffinity.scheduler_extender.core.extender_v1 import AskedNodes
from hostaffinity.schema import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY

CacheFactory = Callable[..., ExtenderCache]  # the `make_cache` fixture (conftest.py)
HOSTNAME = "kubernetes.io/hostname"
HOSTS: dict[str, str | None] = {"node1": "host1", "node2": "host1", "node3": "host2", "node4": None}
ALL = ["node1", "node2", "node3", "node4"]
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
AFFINITY = "node(s) didn't match pod affinity rules"
UNPLACED = "node(s) had no known ESXi host"
UNKNOWN = "node(s) unknown to hostaffinity"


def term(app: str, key: str = LABEL_ESXI_HOST) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=key, label_selector=LabelSelector(match_labels={"app": app})
    )


def pod(
    name: str,
    app: str,
    node: str = "",
    *,
    anti: PodAffinityTerm | None = None,
    affinity: PodAffinityTerm | None = None,
    prefer_apart: PodAffinityTerm | None = None,
    owner: str | None = None,
    annotations: dict[str, str] | None = None,
) -> Pod:
    required_anti = [anti] if anti else None
    preferred_anti = [WeightedPodAffinityTerm(100, prefer_apart)] if prefer_apart else None
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            labels={"app": app},
            annotations=annotations or {},
            owner_references=[OwnerReference("ReplicaSet", owner, f"rs-{owner}", True)]
            if owner
            else [],
        ),
        spec=PodSpec(
            node_name=node,
            affinity=Affinity(
                pod_affinity=PodAffinity(affinity and [affinity]),
                pod_anti_affinity=PodAffinity(required_anti, preferred_anti),
            ),
        ),
    )


P1 = pod("p1", "db", "node1")
GUARD = pod("guard", "guard", "node3", anti=term("web"))

# (id, existing pods, incoming pod, asked nodes, passed, {node: reason} failed,
#  {node: reason} unresolvable)
FILTER_CASES: list[tuple[str, list[Pod], Pod, list[str], list[str], dict[str, str], Any]] = [
    ("no-host-terms-pass-all-even-unknown", [P1], pod("p3", "web"), [*ALL, "ghost"],
     [*ALL, "ghost"], {}, {}),
    ("seed-004-host-anti-affinity", [P1], pod("p3", "web", anti=term("db")), ALL,
     ["node3"], {"node1": ANTI, "node2": ANTI}, {"node4": UNPLACED}),
    ("hostname-anti-affinity-read-physically-on-opt-in", [P1],
     pod("p3", "web", anti=term("db", HOSTNAME), annotations={POD_PHYSICAL_ANTI_AFFINITY: "true"}),
     ALL, ["node3"], {"node1": ANTI, "node2": ANTI}, {"node4": UNPLACED}),
    ("hostname-anti-affinity-left-to-kube-scheduler", [P1],
     pod("p3", "web", anti=term("db", HOSTNAME)), ALL, ALL, {}, {}),
    ("existing-pod-anti-affinity-is-symmetric", [P1, GUARD], pod("w", "web"), ["node1", "node3"],
     ["node1"], {"node3": EXISTING}, {}),
    ("host-affinity", [P1], pod("p3", "web", affinity=term("db")), ALL,
     ["node1", "node2"], {}, {"node3": AFFINITY, "node4": UNPLACED}),
    ("unknown-node-fails-a-concerned-pod", [P1], pod("p3", "web", anti=term("db")),
     ["ghost", "node3"], ["node3"], {}, {"ghost": UNKNOWN}),
    ("answer-keeps-the-asked-order", [P1], pod("p3", "web", anti=term("db")),
     ["node3", "node2"], ["node3"], {"node2": ANTI}, {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("existing", "incoming", "asked", "passed", "failed", "unresolvable"),
    [case[1:] for case in FILTER_CASES],
    ids=[case[0] for case in FILTER_CASES],
)
def test_filter(
    make_cache: CacheFactory,
    existing: list[Pod],
    incoming: Pod,
    asked: list[str],
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
) -> None:
    answer, verdict = answers.filter_nodes(
        make_cache(HOSTS, existing), incoming, AskedNodes(asked, None)
    )
    assert answer.node_names == passed
    assert answer.nodes is None
    assert answer.error == ""
    assert {n: m.split(": ", 1)[0] for n, m in answer.failed_nodes.items()} == failed
    assert {
        n: m.split(": ", 1)[0] for n, m in answer.failed_and_unresolvable_nodes.items()
    } == unresolvable
    assert set(passed) | set(failed) | set(unresolvable) == set(asked)
    assert verdict.outcome == (answers.FEASIBLE if passed else answers.UNSCHEDULABLE)
    assert verdict.passed == len(passed)
    assert sum(verdict.rejections.values()) == len(failed) + len(unresolvable)


def test_a_failed_node_carries_the_engines_explanation(make_cache: CacheFactory) -> None:
    answer, _ = answers.filter_nodes(
        make_cache(HOSTS, [P1]), pod("p3", "web", anti=term("db")), AskedNodes(["node2"], None)
    )
    assert answer.failed_nodes == {
        "node2": "node(s) didn't match pod anti-affinity rules: pod default/p1 (on node node1) "
        "matches the pod's required anti-affinity term {app=db} in namespaces [default] on "
        "topology key hostaffinity.io/esxi-host and is in the node's domain "
        "hostaffinity.io/esxi-host=host1"
    }


def test_nothing_passes_gives_kube_schedulers_summary(make_cache: CacheFactory) -> None:
    _, verdict = answers.filter_nodes(
        make_cache(HOSTS, [P1]), pod("p3", "web", anti=term("db")), AskedNodes(["node1"], None)
    )
    assert verdict.outcome == answers.UNSCHEDULABLE
    assert verdict.message == f"0/1 nodes are available: 1 {ANTI}."


def test_unsynced_cache_answers_with_an_error(make_cache: CacheFactory) -> None:
    cache = make_cache(HOSTS, [P1], synced=False)
    cache.add_sync_check("pods", lambda: True)
    answer, verdict = answers.filter_nodes(cache, pod("p3", "web"), AskedNodes(ALL, None))
    expected = (
        "hostaffinity scheduler-extender cache is not synced yet (nodes, namespaces, placements)"
    )
    assert (answer.error, answer.node_names, answer.nodes) == (expected, None, None)
    assert verdict.outcome == answers.ERROR
    priorities, verdict = answers.prioritize(cache, pod("p3", "web"), AskedNodes(ALL, None))
    assert priorities is None
    assert verdict.message == expected


def scores(cache: ExtenderCache, incoming: Pod, asked: list[str]) -> dict[str, int]:
    priorities, verdict = answers.prioritize(cache, incoming, AskedNodes(asked, None))
    assert priorities is not None
    assert [p.host for p in priorities] == asked
    assert verdict.outcome == answers.SCORED
    return {p.host: p.score for p in priorities}


PRIORITY_CASES = [
    # Nothing to prefer: every node the same (the mean of 0 and a full spread score).
    ("neutral", [P1], pod("x", "web"), {"node1": 5, "node2": 5, "node3": 5, "node4": 5}),
    ("replicas-spread-over-hosts", [pod("r1", "web", "node1", owner="a")],
     pod("r2", "web", owner="a"), {"node1": 0, "node2": 0, "node3": 5, "node4": 5}),
    ("preferred-host-anti-affinity-and-spread", [pod("r1", "db", "node1", owner="a")],
     pod("r2", "db", owner="a", prefer_apart=term("db")),
     {"node1": 0, "node2": 0, "node3": 10, "node4": 10}),
    ("other-owners-do-not-count", [pod("r1", "web", "node1", owner="b")],
     pod("r2", "web", owner="a"), {"node1": 5, "node2": 5, "node3": 5, "node4": 5}),
    ("unknown-node-gets-no-preference", [P1], pod("x", "web", prefer_apart=term("db")),
     {"node2": 5, "node3": 10, "ghost": 5}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("existing", "incoming", "expected"),
    [case[1:] for case in PRIORITY_CASES],
    ids=[case[0] for case in PRIORITY_CASES],
)
def test_prioritize(
    make_cache: CacheFactory, existing: list[Pod], incoming: Pod, expected: dict[str, int]
) -> None:
    assert scores(make_cache(HOSTS, existing), incoming, list(expected)) == expected


def test_a_bound_pod_counts_at_once_and_survives_a_lagging_informer(
    make_cache: CacheFactory,
) -> None:
    cache = make_cache(HOSTS)
    first = pod("r1", "web", anti=term("web"), owner="a")
    cache.upsert_pod(first)  # the informer reports it pending
    assert cache.assume("default", "r1", "uid-r1", "node1")
    cache.upsert_pod(first)  # a stale unassigned event arrives after the binding
    second = pod("r2", "web", anti=term("web"), owner="a")
    answer, _ = answers.filter_nodes(cache, second, AskedNodes(ALL, None))
    assert answer.node_names == ["node3"]
    assert scores(cache, second, ["node2", "node3"]) == {"node2": 0, "node3": 5}
    cache.remove_pod("default/r1")
    cache.note_incoming(second)  # kube-scheduler retries r2: its own reservation is let go
    answer, _ = answers.filter_nodes(cache, second, AskedNodes(["node1", "node3"], None))
    # Both hosts are free again; r2 is held on one of them, the other is refused with why.
    assert answer.node_names in (["node1"], ["node3"])
    (other,) = answer.failed_nodes
    assert answer.failed_nodes[other].startswith("hostaffinity: pod default/r2 is held on ESXi")


def test_a_bind_after_a_filter_counts_before_the_informer_knows_the_pod(
    make_cache: CacheFactory,
) -> None:
    cache = make_cache(HOSTS)
    cache.note_incoming(pod("r1", "web", anti=term("web")))  # filtered, then bound by us
    assert cache.assume("default", "r1", "uid-r1", "node1")
    answer, _ = answers.filter_nodes(cache, pod("r2", "web"), AskedNodes(["node2", "node3"], None))
    assert answer.node_names == ["node3"]


def test_a_recreated_pod_does_not_inherit_an_old_binding(make_cache: CacheFactory) -> None:
    cache = make_cache(HOSTS)
    cache.assume("default", "r1", "uid-old", "node1")
    cache.upsert_pod(pod("r1", "web", anti=term("web")))  # uid-r1: another incarnation
    answer, _ = answers.filter_nodes(cache, pod("r2", "web"), AskedNodes(["node2"], None))
    assert answer.node_names == ["node2"]
