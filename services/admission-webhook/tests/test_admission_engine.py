"""The mutation, tied to the engine that agrees with kube-scheduler.

On random clusters and pods: the nodes kube-scheduler lets the *mutated* pod take (engine in
KUBE_SCHEDULER mode, every pod as the webhook admitted it) are exactly the nodes the extender
path lets the *original* pod take (kube-scheduler's own answer on the pods as written, then the
engine's physical reading, PHYSICAL mode). So the webhook hands kube-scheduler the physical
intent, nothing more and nothing less.

The two worlds see what each reader sees: kube-scheduler never reads our opt-in annotation, so
the mutated pods are indexed without it; both go through the API server's matchLabelKeys merge
(apply_label_keys), which happens after admission. The clusters hold only what PHYSICAL mode
decides (no taints, no node affinity, anti-affinity on hostname or host, affinity on the host),
since everything else kube-scheduler decides alone and the mutation leaves it untouched.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from hostaffinity.admission_webhook.core.mutation import MutationSettings, plan_pod
from hostaffinity.affinity.engine import FilterMode
from hostaffinity.affinity.interpod import apply_label_keys
from hostaffinity.affinity.model import Node, Pod
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.affinity import engine, node
from tests.platform.builders.affinity_strategies import NAMESPACES, pod_terms

NODE_NAMES = [f"n{i}" for i in range(6)]
HOSTS = ["h1", "h2", "h3"]
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@st.composite
def terms(draw: st.DrawFn, keys: list[str]) -> dict[str, Any]:
    """The engine properties' random term, on one of `keys`, sometimes with matchLabelKeys."""
    term: dict[str, Any] = draw(pod_terms()) | {"topologyKey": draw(st.sampled_from(keys))}
    if draw(st.booleans()):
        term["matchLabelKeys"] = ["pod-template-hash"]
    return term


@st.composite
def affinities(draw: st.DrawFn, with_required_anti: bool) -> dict[str, Any]:
    anti_keys = [HOSTNAME, LABEL_ESXI_HOST]
    required_anti = draw(st.lists(terms(anti_keys), max_size=2)) if with_required_anti else []
    preferred_anti = draw(st.lists(terms(anti_keys), max_size=2))
    weights = draw(st.lists(st.integers(1, 100), min_size=2, max_size=2))
    affinity: dict[str, Any] = {
        "podAntiAffinity": {
            REQUIRED: required_anti,
            PREFERRED: [
                {"weight": w, "podAffinityTerm": t}
                for w, t in zip(weights, preferred_anti, strict=False)
            ],
        }
    }
    together = draw(st.lists(terms([LABEL_ESXI_HOST]), max_size=1))
    if together:
        affinity["podAffinity"] = {REQUIRED: together}
    return affinity


@st.composite
def pods(draw: st.DrawFn, name: str, assigned: bool, with_required_anti: bool) -> dict[str, Any]:
    labels: dict[str, str] = {}
    for key, values in (
        ("app", ["a", "b", "c"]),
        ("tier", ["x"]),
        ("pod-template-hash", ["r1", "r2"]),
        ("kubevirt.io/created-by", ["vmi-uid-1", "vmi-uid-2"]),  # virt-launcher pods of 2 VMs
    ):
        if draw(st.booleans()):
            labels[key] = draw(st.sampled_from(values))
    spec: dict[str, Any] = {"affinity": draw(affinities(with_required_anti))}
    if assigned:
        spec["nodeName"] = draw(st.sampled_from([*NODE_NAMES, "ghost"]))
    metadata = {
        "name": name,
        "namespace": draw(st.sampled_from(list(NAMESPACES))),
        "labels": labels,
        "annotations": {POD_PHYSICAL_ANTI_AFFINITY: "true"},
    }
    return {"metadata": metadata, "spec": spec}


Cluster = tuple[list[Node], dict[str, str], list[dict[str, Any]]]


@st.composite
def clusters(draw: st.DrawFn, every_node_placed: bool) -> Cluster:
    """Nodes whose host label and placement agree (or both are missing), and assigned pods.
    Where some nodes may be unplaced, existing pods carry no required anti-affinity (see below).
    """
    count = draw(st.integers(1, len(NODE_NAMES)))
    node_list: list[Node] = []
    placement: dict[str, str] = {}
    for name in NODE_NAMES[:count]:
        labels = {HOSTNAME: name}
        placed = every_node_placed or draw(st.booleans())
        if placed:
            host = draw(st.sampled_from(HOSTS))
            labels[LABEL_ESXI_HOST] = placement[name] = host
        node_list.append(node(name, labels))
    existing = [
        draw(pods(f"p{i}", True, every_node_placed)) for i in range(draw(st.integers(0, 8)))
    ]
    return node_list, placement, existing


def as_admitted(pod: dict[str, Any], patched: bool = True) -> dict[str, Any]:
    """The pod the API server stores after our patch (or without it), as kube-scheduler reads
    it."""
    operations = plan_pod(pod, MutationSettings()).operations if patched else []
    stored: dict[str, Any] = copy.deepcopy(jsonpatch.apply_patch(pod, operations))
    stored["metadata"]["annotations"].pop(POD_PHYSICAL_ANTI_AFFINITY)
    return stored


def decoded(pod: dict[str, Any]) -> Pod:
    return apply_label_keys(msgspec.convert(pod, Pod))


def feasible_both_ways(cluster: Cluster, incoming: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The webhook's path (kube-scheduler on the mutated pods) and the extender's (kube-scheduler
    on the pods as written, then the physical reading). For most pods the physical reading alone
    decides, the host being wider than the node; a virt-launcher pod's host reading leaves out
    its own VM's pods, which its hostname term, left to kube-scheduler, still keeps apart."""
    node_list, placement, existing = cluster

    def feasible(patched: bool) -> list[str]:
        world = engine(
            node_list, [decoded(as_admitted(p, patched)) for p in existing], NAMESPACES, placement
        )
        return world.filter(decoded(as_admitted(incoming, patched))).feasible

    physical = engine(
        node_list, [decoded(p) for p in existing], NAMESPACES, placement, fail_unplaced=True
    ).filter(decoded(incoming), mode=FilterMode.PHYSICAL)
    native = set(feasible(patched=False))
    return feasible(patched=True), [n for n in physical.feasible if n in native]


@settings(max_examples=300, deadline=None)
@given(clusters(every_node_placed=True), pods("incoming", False, True))
def test_mutated_pod_under_kube_scheduler_equals_original_under_physical_reading(
    cluster: Cluster, incoming: dict[str, Any]
) -> None:
    admitted, physical = feasible_both_ways(cluster, incoming)
    assert admitted == physical


@settings(max_examples=300, deadline=None)
@given(clusters(every_node_placed=False), pods("incoming", False, True))
def test_unplaced_nodes_are_refused_as_the_engine_refuses_them(
    cluster: Cluster, incoming: dict[str, Any]
) -> None:
    """With nodes that carry no host label: the required host label does what the engine's
    `fail_unplaced` does for the pod's own host terms. (An existing pod's host term that selects
    the incoming pod also refuses unplaced nodes in the engine; the webhook cannot see existing
    pods at admission, so those clusters are left out here: the extender or the descheduler
    covers that case.)"""
    admitted, physical = feasible_both_ways(cluster, incoming)
    assert admitted == physical
