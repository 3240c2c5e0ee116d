"""A fleet group member's preferred terms at admission: away from other clusters' members' hosts
(a snapshot of the fleet view) and apart from this cluster's members (kept by kube-scheduler);
never a required term, written against the pod as the main mutation leaves it, never twice."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from hostaffinity.admission_webhook.core.fleet_affinity import with_fleet_terms
from hostaffinity.admission_webhook.core.mutation import (
    PREFERRED,
    REQUIRED,
    Mutation,
    MutationSettings,
    plan_pod,
)
from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    LABEL_FLEET_GROUP,
    POD_PHYSICAL_ANTI_AFFINITY,
    ReplicaPlacement,
    WorkloadPlacement,
)

AVOID = {
    "weight": 100,
    "preference": {
        "matchExpressions": [
            {"key": LABEL_ESXI_HOST, "operator": "NotIn", "values": ["esx-1", "esx-3"]}
        ]
    },
}
APART = {
    "weight": 100,
    "podAffinityTerm": {
        "labelSelector": {"matchLabels": {LABEL_FLEET_GROUP: "db"}},
        "namespaceSelector": {},
        "topologyKey": LABEL_ESXI_HOST,
    },
}
IN_ZONE_A = {
    "weight": 5,
    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
}
HOSTNAME_ANTI = {
    "labelSelector": {"matchLabels": {"app": "db"}},
    "topologyKey": "kubernetes.io/hostname",
}


def fleet_with(*hosts: str) -> FleetMembers:
    fleet = FleetMembers("me")
    for i, host in enumerate(hosts):
        fleet.put(
            f"c{i}.workload.shop.StatefulSet.db",
            WorkloadPlacement(
                cluster=f"c{i}",
                namespace="shop",
                kind="StatefulSet",
                name="db",
                fleet_group="db",
                replicas=[ReplicaPlacement(pod="db-0", host_name=host, host_id=f"u/{host}")],
            ),
        )
    return fleet


def pod(labels: dict[str, str], spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db-1", "namespace": "shop", "labels": labels, **meta},
        "spec": {"containers": [{"name": "db", "image": "db:1"}], **(spec or {})},
    }


def admitted(sent: dict[str, Any], fleet: FleetMembers) -> tuple[dict[str, Any], Mutation]:
    """The pod as the API server stores it after the whole mutation."""
    mutation = with_fleet_terms(plan_pod(sent, MutationSettings()), sent, fleet)
    return jsonpatch.apply_patch(copy.deepcopy(sent), mutation.operations), mutation


MEMBER = {LABEL_FLEET_GROUP: "db"}


@pytest.mark.parametrize(
    ("sent", "hosts", "affinity"),
    [
        pytest.param(
            pod(MEMBER),
            ("esx-3", "esx-1", "esx-1"),
            {"nodeAffinity": {PREFERRED: [AVOID]}, "podAntiAffinity": {PREFERRED: [APART]}},
            id="no affinity yet: both terms, the hosts sorted and once each",
        ),
        pytest.param(
            pod(MEMBER),
            (),
            {"podAntiAffinity": {PREFERRED: [APART]}},
            id="no other cluster's member: apart from this cluster's only",
        ),
        pytest.param(
            pod(MEMBER, {"affinity": {"nodeAffinity": {PREFERRED: [IN_ZONE_A]}}}),
            ("esx-1", "esx-3"),
            {
                "nodeAffinity": {PREFERRED: [IN_ZONE_A, AVOID]},
                "podAntiAffinity": {PREFERRED: [APART]},
            },
            id="the pod's own preferences kept, ours appended",
        ),
        pytest.param(
            pod({"app": "db"}),
            ("esx-1",),
            None,
            id="a pod of no group is left alone",
        ),
        pytest.param(
            pod({LABEL_FLEET_GROUP: ""}),
            ("esx-1",),
            None,
            id="an empty group opts nothing in",
        ),
    ],
)  # fmt: skip
def test_a_member_gets_preferred_terms_only(
    sent: dict[str, Any], hosts: tuple[str, ...], affinity: dict[str, Any] | None
) -> None:
    stored, _ = admitted(sent, fleet_with(*hosts))
    assert stored["spec"].get("affinity") == affinity
    for kind in ("nodeAffinity", "podAntiAffinity", "podAffinity"):
        assert REQUIRED not in (stored["spec"].get("affinity") or {}).get(kind, {})


def test_the_terms_go_onto_the_pod_as_the_main_mutation_leaves_it() -> None:
    """An opted-in pod with a required hostname anti-affinity term and no node affinity: the
    main mutation adds a host twin and the required host label (creating nodeAffinity); ours
    land beside them, none overwritten."""
    sent = pod(
        {**MEMBER, "app": "db"},
        {"affinity": {"podAntiAffinity": {REQUIRED: [HOSTNAME_ANTI]}}},
        annotations={POD_PHYSICAL_ANTI_AFFINITY: "true"},
    )
    stored, mutation = admitted(sent, fleet_with("esx-1", "esx-3"))
    assert mutation.twins == 1
    affinity = stored["spec"]["affinity"]
    assert len(affinity["podAntiAffinity"][REQUIRED]) == 2  # the term and its host twin
    assert affinity["podAntiAffinity"][PREFERRED] == [APART]
    assert affinity["nodeAffinity"][REQUIRED]  # the main mutation's host label requirement
    assert affinity["nodeAffinity"][PREFERRED] == [AVOID]


def test_a_second_pass_adds_nothing() -> None:
    """kube-apiserver may invoke the webhook again on the mutated pod (reinvocationPolicy)."""
    fleet = fleet_with("esx-1", "esx-3")
    stored, _ = admitted(pod(MEMBER), fleet)
    again = with_fleet_terms(plan_pod(stored, MutationSettings()), stored, fleet)
    assert again.operations == []


def test_a_pod_the_planner_cannot_read_is_left_to_its_warning() -> None:
    sent = pod(MEMBER, {"affinity": "not an object"})
    mutation = with_fleet_terms(plan_pod(sent, MutationSettings()), sent, fleet_with("esx-1"))
    assert mutation.operations == []
    assert mutation.warnings


@pytest.mark.parametrize(
    "spec",
    [
        {"affinity": {"nodeAffinity": "not an object"}},
        {"affinity": {"nodeAffinity": {PREFERRED: {"not": "a list"}}}},
        {"affinity": {"podAntiAffinity": {PREFERRED: ["not a term", {"podAffinityTerm": 3}]}}},
        {"affinity": {"nodeAffinity": {PREFERRED: [{"preference": {"matchExpressions": 7}}]}}},
    ],
)
def test_odd_shapes_never_break_the_review(spec: dict[str, Any]) -> None:
    """Shapes the API server refuses anyway: the webhook answers (no exception), a patch it
    gives applies to the pod, and the odd field is left as the pod's author wrote it."""
    sent = pod(MEMBER, spec)
    mutation = with_fleet_terms(plan_pod(sent, MutationSettings()), sent, fleet_with("esx-1"))
    stored = jsonpatch.apply_patch(copy.deepcopy(sent), mutation.operations)
    for kind, written in spec["affinity"].items():
        if not isinstance(written, dict) or not isinstance(written.get(PREFERRED), list):
            assert stored["spec"]["affinity"][kind] == written
