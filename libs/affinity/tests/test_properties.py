"""Hypothesis properties on random small clusters.

1. The indexed engine gives the same per-node answer as a direct evaluation of the same rules,
   written the way kube-scheduler's plugins do it (count maps over every pod, then node by node).
   So does a filter asked about one node (the path that tests a few nodes one by one).
2. The engine's one-node-at-a-time first_fit picks the node a full filter would: the first of
   the asked order that is feasible and accepted.
3. Feeding the index the same objects through any order of adds, updates and removes gives an
   index equal to a fresh build from the final objects.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any, get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from hostaffinity.affinity import explain
from hostaffinity.affinity.engine import FilterResult
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import (
    HOST_KEYS,
    PhysicalAntiAffinity,
    compile_pod_terms,
    incoming_scope,
)
from hostaffinity.affinity.model import Node, Pod
from hostaffinity.affinity.nodeaffinity import required_node_affinity
from hostaffinity.affinity.taints import UNSCHEDULABLE_TAINT, first_untolerated, tolerated
from hostaffinity.schema.names import LABEL_ESXI_HOST, LABEL_LEGACY_HOST
from tests.platform.builders.affinity import engine, node, pod
from tests.platform.builders.affinity_strategies import NAMESPACES, pod_terms

NODE_NAMES = [f"n{i}" for i in range(6)]

label_values = st.sampled_from(["a", "b", "c"])


def optional(key: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.one_of(st.just({}), values.map(lambda v: {key: v}))


@st.composite
def affinities(draw: st.DrawFn) -> dict[str, Any] | None:
    affinity: dict[str, Any] = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        required = draw(st.lists(pod_terms(), max_size=2))
        weighted = draw(st.lists(pod_terms(), max_size=1))
        if required or weighted:
            affinity[kind] = {
                "requiredDuringSchedulingIgnoredDuringExecution": required,
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "podAffinityTerm": t} for t in weighted
                ],
            }
    if draw(st.booleans()):
        expression = {
            "key": "perf",
            "operator": draw(st.sampled_from(["Gt", "Lt"])),
            "values": ["2"],
        }
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    return affinity or None


@st.composite
def nodes(draw: st.DrawFn, name: str) -> Node:
    labels = {"kubernetes.io/hostname": name, "perf": draw(st.sampled_from(["1", "2", "3"]))}
    labels |= draw(optional("zone", st.sampled_from(["z1", "z2"])))
    labels |= draw(optional(LABEL_ESXI_HOST, st.sampled_from(["h1", "h2", "h3"])))
    labels |= draw(optional(LABEL_LEGACY_HOST, st.sampled_from(["h1", "h2"])))
    taints = draw(
        st.lists(
            st.builds(
                dict,
                key=st.sampled_from(["gpu", "dedicated"]),
                value=st.sampled_from(["", "x"]),
                effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            ),
            max_size=1,
        )
    )
    return node(name, labels, taints, unschedulable=draw(st.booleans()) and draw(st.booleans()))


@st.composite
def pods(draw: st.DrawFn, name: str, assigned: bool) -> Pod:
    labels = draw(optional("app", label_values)) | draw(optional("tier", st.just("x")))
    tolerations = draw(
        st.lists(
            st.builds(
                dict,
                key=st.sampled_from(["gpu", "dedicated", ""]),
                operator=st.just("Exists"),
                effect=st.sampled_from(["", "NoSchedule"]),
            ),
            max_size=1,
        )
    )
    return pod(
        name,
        draw(st.sampled_from(list(NAMESPACES))),
        labels,
        draw(st.sampled_from([*NODE_NAMES, "ghost"])) if assigned else "",
        draw(affinities()),
        tolerations,
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod], dict[str, str], bool]:
    count = draw(st.integers(1, len(NODE_NAMES)))
    node_list = [draw(nodes(n)) for n in NODE_NAMES[:count]]
    pod_list = [draw(pods(f"p{i}", True)) for i in range(draw(st.integers(0, 10)))]
    placement = draw(
        st.dictionaries(st.sampled_from(NODE_NAMES), st.sampled_from(["h1", "h2", "h9"]))
    )
    return node_list, pod_list, placement, draw(st.sampled_from(get_args(PhysicalAntiAffinity)))


def reference_filter(
    node_list: list[Node],
    existing: list[Pod],
    placement: dict[str, str],
    physical: PhysicalAntiAffinity,
    pod: Pod,
) -> dict[str, str | None]:
    """Per-node first rejecting reason, evaluated directly, kube-scheduler style."""
    by_name = {n.metadata.name: n for n in node_list}

    def view(name: str) -> dict[str, str]:
        labels = dict(by_name[name].metadata.labels)
        if name in placement:
            labels.update(dict.fromkeys(HOST_KEYS, placement[name]))
        return labels

    placed = [p for p in existing if p.spec.node_name in by_name and p.key != pod.key]
    terms = compile_pod_terms(pod, physical)
    affinity = [(t, incoming_scope(t, NAMESPACES)) for t in terms.required_affinity]
    anti = [(t, incoming_scope(t, NAMESPACES)) for t in terms.required_anti]

    def selects(term_scope: Any, other: Pod) -> bool:
        term, scope = term_scope
        return other.metadata.namespace in scope and term.selector.matches(other.metadata.labels)

    affinity_counts: Counter[tuple[str, str]] = Counter()
    anti_counts: Counter[tuple[str, str]] = Counter()
    existing_counts: Counter[tuple[str, str]] = Counter()
    ns_labels = NAMESPACES.get(pod.metadata.namespace, {})
    for other in placed:
        labels = view(other.spec.node_name)
        if affinity and all(selects(ts, other) for ts in affinity):
            for term, _ in affinity:
                if term.topology_key in labels:
                    affinity_counts[term.topology_key, labels[term.topology_key]] += 1
        for term_scope in anti:
            key = term_scope[0].topology_key
            if selects(term_scope, other) and key in labels:
                anti_counts[key, labels[key]] += 1
        for term in compile_pod_terms(other, physical).required_anti:
            key = term.topology_key
            if (
                term.matches(pod.metadata.namespace, pod.metadata.labels, ns_labels)
                and key in labels
            ):
                existing_counts[key, labels[key]] += 1

    self_match = bool(affinity) and all(
        pod.metadata.namespace in scope and term.selector.matches(pod.metadata.labels)
        for term, scope in affinity
    )
    required = required_node_affinity(pod)
    tolerations = pod.spec.tolerations
    answers: dict[str, str | None] = {}
    for name, item in by_name.items():
        labels = view(name)
        reason: str | None = None
        if required.prefilter_names is not None and name not in required.prefilter_names:
            reason = explain.REASON_NODE_NAMES
        elif item.spec.unschedulable and not tolerated(tolerations, UNSCHEDULABLE_TAINT):
            reason = explain.REASON_UNSCHEDULABLE
        elif first_untolerated(tolerations, item.spec.taints) is not None:
            reason = explain.REASON_TAINT
        elif not required.matches(name, item.metadata.labels):
            reason = explain.REASON_NODE_AFFINITY
        elif any(t.topology_key not in labels for t, _ in affinity) or (
            any(affinity_counts[t.topology_key, labels[t.topology_key]] <= 0 for t, _ in affinity)
            and not (not affinity_counts and self_match)
        ):
            reason = explain.REASON_AFFINITY
        elif any(
            t.topology_key in labels and anti_counts[t.topology_key, labels[t.topology_key]] > 0
            for t, _ in anti
        ):
            reason = explain.REASON_ANTI_AFFINITY
        elif any(existing_counts[pair] > 0 for pair in labels.items()):
            reason = explain.REASON_EXISTING_ANTI_AFFINITY
        answers[name] = reason
    return answers


@settings(max_examples=200, deadline=None)
@given(clusters(), pods("incoming", False))
def test_indexed_filter_equals_direct_evaluation(
    cluster: tuple[list[Node], list[Pod], dict[str, str], bool], incoming: Pod
) -> None:
    node_list, pod_list, placement, physical = cluster
    built = engine(node_list, pod_list, NAMESPACES, placement, physical)
    expected = reference_filter(node_list, pod_list, placement, physical, incoming)
    assert _answers(built.filter(incoming)) == expected
    for name, reason in expected.items():  # asked one node at a time: tested one by one
        assert _answers(built.filter(incoming, [name])) == {name: reason}


def _answers(result: FilterResult) -> dict[str, str | None]:
    return {n: None for n in result.feasible} | {n: r.reason for n, r in result.rejected.items()}


@settings(max_examples=200, deadline=None)
@given(
    clusters(),
    pods("incoming", False),
    st.permutations(NODE_NAMES),
    st.sets(st.sampled_from(NODE_NAMES)),
)
def test_first_fit_is_the_first_feasible_node_accepted(
    cluster: tuple[list[Node], list[Pod], dict[str, str], bool],
    incoming: Pod,
    order: list[str],
    refused: set[str],
) -> None:
    node_list, pod_list, placement, physical = cluster
    built = engine(node_list, pod_list, NAMESPACES, placement, physical)
    known = [n for n in order if built.index.has_node(n)]
    feasible = set(built.filter(incoming).feasible)
    expected = next((n for n in known if n in feasible and n not in refused), None)
    assert built.first_fit(incoming, known, lambda n: n not in refused) == expected


Event = Callable[[ClusterIndex], None]


@settings(max_examples=100, deadline=None)
@given(clusters(), clusters(), st.randoms(use_true_random=False))
def test_any_event_order_builds_the_same_index(
    final: tuple[list[Node], list[Pod], dict[str, str], bool],
    earlier: tuple[list[Node], list[Pod], dict[str, str], bool],
    rng: random.Random,
) -> None:
    node_list, pod_list, placement, physical = final
    old_nodes, old_pods, old_placement, _ = earlier
    fresh = engine(node_list, pod_list, NAMESPACES, placement, physical).index

    # Per object: stale versions first (from the other cluster), then the final state.
    queues: list[list[Event]] = []
    final_pods = {p.key: p for p in pod_list}
    for old in old_pods:
        if old.key in final_pods:
            continue
        queues.append([lambda i, p=old: i.upsert_pod(p), lambda i, k=old.key: i.remove_pod(k)])
    for key, current in final_pods.items():
        stale = [p for p in old_pods if p.key == key]
        queues.append(
            [*(lambda i, p=p: i.upsert_pod(p) for p in stale), lambda i, p=current: i.upsert_pod(p)]
        )
    final_nodes = {n.metadata.name: n for n in node_list}
    for old_node in old_nodes:
        name = old_node.metadata.name
        last: Event = (
            (lambda i, n=final_nodes[name]: i.upsert_node(n))
            if name in final_nodes
            else (lambda i, n=name: i.remove_node(n))
        )
        queues.append([lambda i, n=old_node: i.upsert_node(n), last])
    for name, current_node in final_nodes.items():
        if name not in {n.metadata.name for n in old_nodes}:
            queues.append([lambda i, n=current_node: i.upsert_node(n)])
    for name in set(placement) | set(old_placement):
        steps: list[Event] = []
        if name in old_placement:
            steps.append(lambda i, n=name, h=old_placement[name]: i.set_placement(n, h))
        host = placement.get(name)
        steps.append(lambda i, n=name, h=host: i.set_placement(n, h))
        queues.append(steps)
    stale_namespace: Event = lambda i: i.set_namespace("ns1", {"stale": "yes"})  # noqa: E731
    queues.append(
        [stale_namespace]
        + [
            lambda i, n=n, labels=labels: i.set_namespace(n, labels)
            for n, labels in NAMESPACES.items()
        ]
    )

    replayed = ClusterIndex(physical_anti_affinity=physical)
    live = [q for q in queues if q]
    while live:
        queue = rng.choice(live)
        queue.pop(0)(replayed)
        live = [q for q in live if q]
    assert replayed == fresh
