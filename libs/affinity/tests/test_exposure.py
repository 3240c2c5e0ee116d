"""Workload identity, exposure and host-level rule coverage, table-driven."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from hostaffinity.affinity.exposure import (
    by_labels,
    by_owner,
    exposed_per_namespace,
    exposed_workloads,
    replica_groups,
)
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.workloads import WorkloadRef, stays_with_node, workload_of
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.affinity import (
    engine,
    node,
    preferred,
    replica,
    required,
    spread,
    term,
)

HOSTNAME = "kubernetes.io/hostname"


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            replica("a"), WorkloadRef("Deployment", "shop", "web"), id="rs-with-hash-is-deployment"
        ),
        pytest.param(
            replica("a", labels={"app": "web"}),
            WorkloadRef("ReplicaSet", "shop", "web-5d8f7"),
            id="rs-without-hash-label-stays-rs",
        ),
        pytest.param(
            replica("a", labels={"pod-template-hash": "zzz"}),
            WorkloadRef("ReplicaSet", "shop", "web-5d8f7"),
            id="rs-hash-not-its-suffix",
        ),
        pytest.param(
            replica("db-0", owner=("StatefulSet", "db")),
            WorkloadRef("StatefulSet", "shop", "db"),
            id="statefulset",
        ),
        pytest.param(
            replica("virt-launcher-vm1-x", owner=("VirtualMachineInstance", "vm1")),
            WorkloadRef("VirtualMachineInstance", "shop", "vm1"),
            id="virt-launcher",
        ),
        pytest.param(replica("bare", owner=None), None, id="bare-pod"),
    ],
)
def test_workload_of(pod: Pod, expected: WorkloadRef | None) -> None:
    assert workload_of(pod) == expected


@pytest.mark.parametrize(
    ("pod", "stays"),
    [
        pytest.param(replica("a"), False, id="deployment-moves"),
        pytest.param(replica("ds", owner=("DaemonSet", "agent")), True, id="daemonset-stays"),
        pytest.param(
            replica("etcd", owner=None, annotations={"kubernetes.io/config.mirror": "x"}),
            True,
            id="mirror-pod-stays",
        ),
    ],
)
def test_stays_with_node(pod: Pod, stays: bool) -> None:
    assert stays_with_node(pod) is stays


NODES = [node(f"n{i}") for i in range(1, 5)]
PLACEMENT = {"n1": "esx-a", "n2": "esx-a", "n3": "esx-b", "n4": "esx-c"}
ANTI_HOST = required("podAntiAffinity", term(LABEL_ESXI_HOST, {"matchLabels": {"app": "web"}}))
ANTI_HOSTNAME = required("podAntiAffinity", term(HOSTNAME, {"matchLabels": {"app": "web"}}))
PREFER_HOST = preferred(
    "podAntiAffinity", (50, term(LABEL_ESXI_HOST, {"matchLabels": {"app": "web"}}))
)
OPT_IN = {POD_PHYSICAL_ANTI_AFFINITY: "true"}


# (case, how the replicas are built, the coverage reported); two of three share esx-a in each.
COVERAGE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("two-of-three-share-a-host", {}, "none"),
    ("required-host-anti-affinity", {"affinity": ANTI_HOST}, "required"),
    ("preferred-host-anti-affinity", {"affinity": PREFER_HOST}, "preferred"),
    ("hostname-term-is-not-host-level", {"affinity": ANTI_HOSTNAME}, "none"),
    (
        "hostname-term-read-physically-with-opt-in",
        {"affinity": ANTI_HOSTNAME, "annotations": OPT_IN},
        "required",
    ),
]


def three(nodes: tuple[str, str, str], **kw: Any) -> list[Pod]:
    return [replica(f"web-{i}", n, **kw) for i, n in enumerate(nodes)]


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(three(("n1", "n3", "n4")), [], id="spread-not-exposed"),
        *(
            pytest.param(three(("n1", "n2", "n3"), **kw), [("esx-a", 2, 0.6667, rule)], id=name)
            for name, kw, rule in COVERAGE_CASES
        ),
        pytest.param(
            [*three(("n1", "n2", "n1")), replica("web-3", "gone")],
            [("esx-a", 3, 0.75, "none")],
            id="replica-on-unknown-node-counts-unplaced",
        ),
    ],
)
def test_exposed_workloads(pods: list[Pod], expected: list[tuple[str, int, float, str]]) -> None:
    index = engine(NODES, pods, placement=PLACEMENT).index
    found = exposed_workloads(index, replica_groups(index.pods(), by_owner()))
    assert [(e.worst_host, e.on_worst_host, e.share, e.coverage) for e in found] == expected
    assert all(e.kind == "Deployment" and e.name == "web" for e in found)


WEB = {"matchLabels": {"app": "web"}}


@pytest.mark.parametrize(
    ("spreads", "annotations", "expected"),
    [
        pytest.param([spread(LABEL_ESXI_HOST, WEB)], None, ("required", True), id="hard"),
        pytest.param(
            [spread(LABEL_ESXI_HOST, WEB, when="ScheduleAnyway")],
            None,
            ("preferred", True),
            id="soft",
        ),
        pytest.param(
            [spread(LABEL_ESXI_HOST, WEB, max_skew=2)], None, ("required", False), id="within-skew"
        ),
        pytest.param([spread(HOSTNAME, WEB)], None, ("none", False), id="hostname-not-host-level"),
        pytest.param([spread(HOSTNAME, WEB)], OPT_IN, ("required", True), id="hostname-opted-in"),
        pytest.param([spread(LABEL_ESXI_HOST, {"matchLabels": {"app": "db"}})], None,
                     ("none", False), id="selects-other-pods"),
    ],
)  # fmt: skip
def test_exposure_reports_host_spreads_and_their_violation(
    spreads: list[dict[str, Any]], annotations: Mapping[str, str] | None, expected: tuple[str, bool]
) -> None:
    """Replicas 2/1/0 over esx-a, esx-b, esx-c: a skew of 2."""
    pods = three(("n1", "n2", "n3"), spreads=spreads, annotations=annotations)
    index = engine(NODES, pods, placement=PLACEMENT).index
    (found,) = exposed_workloads(index, replica_groups(index.pods(), by_owner()))
    assert (found.spread, found.spread_violated) == expected


def test_min_replicas_and_worst_first() -> None:
    pods = [
        *three(("n1", "n2", "n3")),
        *(
            replica(
                f"db-{i}",
                "n3" if i < 2 else "n4",
                owner=("StatefulSet", "db"),
                labels={"app": "db"},
            )
            for i in range(3)
        ),
        *(
            replica(f"q-{i}", "n1", owner=("StatefulSet", "q"), labels={"app": "q"})
            for i in range(2)
        ),
    ]
    index = engine(NODES, pods, placement=PLACEMENT).index
    groups = replica_groups(index.pods(), by_owner())
    names = [e.name for e in exposed_workloads(index, groups)]
    assert names == ["q", "web", "db"]  # 2/2 first; then 2/3 by kind (Deployment < StatefulSet)
    assert [e.name for e in exposed_workloads(index, groups, min_replicas=3)] == ["web", "db"]


def test_vmi_replicas_group_by_the_vmis_owner() -> None:
    pods = [
        replica(f"virt-launcher-vm{i}", n, owner=("VirtualMachineInstance", f"vm{i}"))
        for i, n in enumerate(("n1", "n2"))
    ]
    index = engine(NODES, pods, placement=PLACEMENT).index
    assert exposed_workloads(index, replica_groups(index.pods(), by_owner())) == []
    owner = WorkloadRef("VirtualMachineInstanceReplicaSet", "shop", "vms")
    owners = {("shop", "vm0"): owner, ("shop", "vm1"): owner}
    found = exposed_workloads(index, replica_groups(index.pods(), by_owner(owners)))
    assert [(e.kind, e.name, e.on_worst_host) for e in found] == [
        ("VirtualMachineInstanceReplicaSet", "vms", 2)
    ]


def test_label_set_grouping_and_namespace_count() -> None:
    pods = [
        replica("a", "n1", owner=None, labels={"tier": "cache"}),
        replica("b", "n2", owner=None, labels={"tier": "cache"}),
        replica("c", "n2", owner=None, labels={"other": "x"}),
    ]
    index = engine(NODES, pods, placement=PLACEMENT).index
    found = exposed_workloads(index, replica_groups(index.pods(), by_labels(["tier"])))
    assert [(e.kind, e.name, e.replicas) for e in found] == [("LabelSet", "tier=cache", 2)]
    owned = engine(NODES, three(("n1", "n2", "n3")), placement=PLACEMENT).index
    assert exposed_per_namespace(owned) == {"shop": 1}
