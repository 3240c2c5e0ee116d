"""Quantities, pod requests, fit, and the what-if maintenance plan, table-driven.

Request cases follow k8s.io/component-helpers/resource/helpers_test.go (TestPodRequests, v1.36):
init containers, restartable sidecars, overhead, pod-level requests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.maintenance import hosts_nodes, plan_maintenance
from hostaffinity.affinity.model import Node, Pod
from hostaffinity.affinity.resources import (
    insufficient,
    node_allocatable,
    parse_quantity,
    pod_requests,
)
from hostaffinity.schema.names import LABEL_ESXI_HOST
from hostaffinity.schema.reports import MaintenanceReport
from tests.platform.builders.affinity import engine, node, pod, replica, required, spread, term


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("100m", 100),
        ("1", 1000),
        ("2.5", 2500),
        ("1Gi", 2**30 * 1000),
        ("128Mi", 128 * 2**20 * 1000),
        ("1k", 1_000_000),
        ("1e3", 1_000_000),
        ("0.1m", 1),  # rounded up, as MilliValue does
        ("110", 110_000),
    ],
)
def test_parse_quantity(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("text", ["", "abc", "1Xi", "1..2"])
def test_bad_quantity_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def container(cpu: str, *, sidecar: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


@pytest.mark.parametrize(
    ("spec", "cpu"),
    [
        pytest.param(
            {"containers": [container("100m"), container("200m")]}, 300, id="sum-of-containers"
        ),
        pytest.param(
            {"containers": [container("100m")], "initContainers": [container("500m")]},
            500,
            id="init-peak-wins",
        ),
        pytest.param(
            {"containers": [container("100m")], "initContainers": [container("50m")]},
            100,
            id="containers-win",
        ),
        pytest.param(
            {
                "containers": [container("100m")],
                "initContainers": [container("200m", sidecar=True), container("250m")],
            },
            450,
            id="sidecar-adds-to-later-init-and-to-containers",
        ),
        pytest.param(
            {"containers": [container("100m")], "overhead": {"cpu": "250m"}}, 350, id="overhead"
        ),
        pytest.param(
            {"containers": [container("100m")], "resources": {"requests": {"cpu": "1"}}},
            1000,
            id="pod-level",
        ),
        pytest.param({"containers": [{"name": "c"}]}, 0, id="no-requests"),
    ],
)
def test_pod_requests(spec: dict[str, Any], cpu: int) -> None:
    assert pod_requests(json.dumps({"spec": spec})).get("cpu", 0) == cpu


@pytest.mark.parametrize(
    ("request_", "used", "pods", "missing"),
    [
        ({"cpu": 500}, {"cpu": 1000}, 0, []),
        ({"cpu": 1500}, {"cpu": 1000}, 0, ["Insufficient cpu"]),
        ({"cpu": 100}, {}, 2, ["Too many pods"]),
        ({"nvidia.com/gpu": 1000}, {}, 0, ["Insufficient nvidia.com/gpu"]),
        ({"cpu": 0}, {"cpu": 2000}, 0, []),
    ],
)
def test_insufficient(
    request_: dict[str, int], used: dict[str, int], pods: int, missing: list[str]
) -> None:
    allocatable = node_allocatable(
        json.dumps({"status": {"allocatable": {"cpu": "2", "pods": "2"}}})
    )
    assert insufficient(request_, allocatable, used, pods) == missing


ANTI = required("podAntiAffinity", term(LABEL_ESXI_HOST, {"matchLabels": {"app": "web"}}))
ROOMY = {"cpu": 8000, "memory": 2**34 * 1000, "pods": 110_000}


def cluster(hosts: int, pods: list[Pod], extra_nodes: Sequence[Node] = ()) -> AffinityEngine:
    nodes = [node(f"n{i}") for i in range(hosts)] + list(extra_nodes)
    placement = {f"n{i}": f"esx-{i}" for i in range(hosts)}
    return engine(nodes, pods, placement=placement)


def anti_set(count: int) -> list[Pod]:
    return [replica(f"web-{i}", f"n{i}", affinity=ANTI) for i in range(count)]


def plan(
    eng: AffinityEngine,
    pods: list[Pod],
    hosts: list[str],
    allocatable: dict[str, dict[str, int]] | None = None,
) -> MaintenanceReport:
    names = eng.index.node_names
    alloc = allocatable if allocatable is not None else dict.fromkeys(names, ROOMY)
    return plan_maintenance(
        eng, hosts, {p.key: p for p in pods}, {p.key: {"cpu": 100} for p in pods}, alloc
    )


def test_three_hosts_anti_affine_replica_is_unsatisfiable() -> None:
    pods = anti_set(3)
    report = plan(cluster(3, pods), pods, ["esx-0"])
    assert [(m.pod, m.verdict) for m in report.moves] == [("shop/web-0", "unsatisfiable")]
    assert not report.ok
    assert [r.pod for r in report.unsatisfiable_rules] == ["shop/web-0"]
    assert LABEL_ESXI_HOST in report.unsatisfiable_rules[0].rule


def test_a_host_spread_with_min_domains_breaks_when_a_host_leaves() -> None:
    """Three replicas spread 1/1/1 with minDomains 3: with one host gone only two domains are
    left, the global minimum is 0, and no remaining host may take a second replica."""
    web = {"matchLabels": {"app": "web"}}
    spreads = [spread(LABEL_ESXI_HOST, web, minDomains=3)]
    pods = [
        pod(f"web-{i}", labels={"app": "web"}, node_name=f"n{i}", spreads=spreads) for i in range(3)
    ]
    report = plan(cluster(3, pods), pods, ["esx-0"])
    assert [(m.pod, m.verdict) for m in report.moves] == [("default/web-0", "unsatisfiable")]
    assert "didn't match pod topology spread constraints" in report.moves[0].reason
    (rule,) = report.unsatisfiable_rules
    assert rule.rule.startswith("topology spread {app=web} over hostaffinity.io/esxi-host")
    assert "minDomains 3" in rule.rule
    # Without minDomains the two remaining hosts take it (1/1 -> 2/1 is within maxSkew 1).
    relaxed = [
        pod(
            f"web-{i}",
            labels={"app": "web"},
            node_name=f"n{i}",
            spreads=[spread(LABEL_ESXI_HOST, web)],
        )
        for i in range(3)
    ]
    assert plan(cluster(3, relaxed), relaxed, ["esx-0"]).ok


def test_four_hosts_the_replica_moves_to_the_free_host() -> None:
    pods = anti_set(3)
    report = plan(cluster(4, pods), pods, ["esx-0"])
    assert [(m.verdict, m.to_node) for m in report.moves] == [("moves", "n3")]
    assert report.ok
    assert report.unsatisfiable_rules == []


def test_two_replicas_leaving_together_cannot_share_the_one_free_host() -> None:
    pods = anti_set(3)
    report = plan(cluster(4, pods), pods, ["esx-0", "esx-1"])
    assert sorted(m.verdict for m in report.moves) == ["moves", "unsatisfiable"]


@pytest.mark.parametrize(
    ("extra", "allocatable", "verdict"),
    [
        pytest.param(
            [node("spare", unschedulable=True)], None, "no-node", id="only-cordoned-node-left"
        ),
        pytest.param(
            [node("spare", taints=[{"key": "k", "effect": "NoSchedule"}])],
            None,
            "no-node",
            id="only-tainted-node-left",
        ),
        pytest.param(
            [node("spare")], {"spare": {"cpu": 50, "pods": 110_000}}, "no-room", id="no-cpu-left"
        ),
        pytest.param(
            [node("spare")], {"spare": {"cpu": 1000, "pods": 0}}, "no-room", id="no-pod-slot-left"
        ),
        pytest.param([node("spare")], {"spare": {"cpu": 1000, "pods": 1000}}, "moves", id="room"),
    ],
)
def test_node_filters_and_room(
    extra: list[Node], allocatable: dict[str, dict[str, int]] | None, verdict: str
) -> None:
    pods = [replica("solo", "n0")]
    eng = cluster(1, pods, extra)
    alloc = allocatable if allocatable is not None else {"spare": ROOMY}
    report = plan(eng, pods, ["esx-0"], alloc)
    assert [m.verdict for m in report.moves] == [verdict]
    assert report.ok is (verdict == "moves")


def test_daemonset_pods_stay_and_vmis_are_named() -> None:
    pods = [
        replica("agent", "n0", owner=("DaemonSet", "agent")),
        replica("virt-launcher-vm1-abc", "n0", owner=("VirtualMachineInstance", "vm1")),
    ]
    eng = cluster(2, pods)
    assert hosts_nodes(eng, ["esx-0"]) == ["n0"]
    report = plan(eng, pods, ["esx-0"])
    assert [(m.pod, m.vmi, m.to_node) for m in report.moves] == [
        ("shop/virt-launcher-vm1-abc", "shop/vm1", "n1")
    ]
    assert msgspec.json.decode(msgspec.json.encode(report))["ok"] is True
