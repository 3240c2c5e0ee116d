"""Host headroom: replicas under a required host-level anti-affinity term against usable hosts."""

from __future__ import annotations

from typing import Any

import pytest

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.headroom import host_headroom, tight_workloads
from hostaffinity.affinity.model import Pod
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.affinity import engine, node, pod, required, term

HOSTNAME = "kubernetes.io/hostname"
NODES = {"a1": "h1", "a2": "h1", "b1": "h2", "b2": "h2", "c1": "h3", "c2": "h3"}
OPTED_IN = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
APART = required("podAntiAffinity", term(HOSTNAME, {"matchLabels": {"app": "db"}}))
# The same rule as the webhook writes it for kube-scheduler: the hostname term and its twin.
APART_WITH_TWIN = required(
    "podAntiAffinity",
    term(HOSTNAME, {"matchLabels": {"app": "db"}}),
    term(LABEL_ESXI_HOST, {"matchLabels": {"app": "db"}}),
)


def replicas(count: int, affinity: dict[str, Any] = APART) -> list[Pod]:
    return [
        pod(
            f"db-{i}",
            labels={"app": "db"},
            node_name=f"{'abc'[i]}1",
            affinity=affinity,
            annotations=OPTED_IN,
        )
        for i in range(count)
    ]


def cluster(
    count: int, cordoned: frozenset[str] = frozenset(), affinity: dict[str, Any] = APART
) -> AffinityEngine:
    nodes = [
        node(name, {HOSTNAME: name, LABEL_ESXI_HOST: host}, unschedulable=name in cordoned)
        for name, host in NODES.items()
    ]
    return engine(nodes, replicas(count, affinity), placement=NODES)


def surge(affinity: dict[str, Any] = APART) -> Pod:
    return pod("db-new", labels={"app": "db"}, affinity=affinity, annotations=OPTED_IN)


@pytest.mark.parametrize(
    ("running", "cordoned", "tight"),
    [
        pytest.param(1, frozenset(), False, id="2-of-3-hosts"),
        pytest.param(2, frozenset(), True, id="3-of-3-hosts"),
        pytest.param(1, frozenset({"c1", "c2"}), True, id="2-of-2-usable-hosts"),
        pytest.param(1, frozenset({"c1"}), False, id="a-host-with-one-usable-node-counts"),
    ],
)
def test_a_rule_is_tight_when_its_replicas_fill_every_usable_host(
    running: int, cordoned: frozenset[str], tight: bool
) -> None:
    found = host_headroom(cluster(running, cordoned), surge())
    assert bool(found) is tight
    if tight:
        assert found[0].replicas == running + 1
        assert found[0].usable_hosts == 3 - (len(cordoned) // 2)
        assert "maxSurge 0" in found[0].sentence()


def test_a_hostname_term_and_its_twin_are_one_rule() -> None:
    found = host_headroom(cluster(2, affinity=APART_WITH_TWIN), surge(APART_WITH_TWIN))
    assert len(found) == 1


def test_a_term_on_nodes_only_is_never_tight() -> None:
    plain = pod("db-new", labels={"app": "db"}, affinity=APART)  # not opted in
    assert host_headroom(cluster(2), plain) == []


def test_status_names_each_tight_rule_once() -> None:
    three = cluster(3)
    pods = {p.key: p for p in replicas(3)}
    found = tight_workloads(three, pods)
    assert [(f.replicas, f.usable_hosts) for f in found] == [(3, 3)]
    assert tight_workloads(cluster(2), {p.key: p for p in replicas(2)}) == []
