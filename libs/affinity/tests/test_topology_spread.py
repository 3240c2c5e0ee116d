"""Compiling topology spread constraints: the scheduler's defaults, matchLabelKeys, the physical
reading of an opted-in pod's hostname spread."""

from __future__ import annotations

from typing import Any

import pytest

from hostaffinity.affinity.engine import FilterMode
from hostaffinity.affinity.interpod import HOSTNAME_KEY
from hostaffinity.affinity.model import Node, Pod
from hostaffinity.affinity.spread_standing import spread_standings
from hostaffinity.affinity.topology_spread import (
    HONOR,
    IGNORE,
    compile_spread_constraints,
)
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.affinity import engine, node, pod, spread


def _pod(*spreads: dict[str, Any], labels: dict[str, str], opted_in: bool = False) -> Pod:
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"} if opted_in else {}
    return pod(labels=labels, spreads=spreads, annotations=annotations)


def _spread(key: str, **extra: Any) -> dict[str, Any]:
    return spread(key, extra.pop("labelSelector", None), **extra)


def test_absent_fields_take_the_scheduler_defaults() -> None:
    (constraint,) = compile_spread_constraints(
        _pod(_spread("zone", labelSelector={"matchLabels": {"app": "web"}}), labels={})
    )
    assert (constraint.min_domains, constraint.node_affinity_policy) == (1, HONOR)
    assert constraint.node_taints_policy == IGNORE
    assert constraint.hard
    assert not constraint.soft
    assert constraint.selector.matches({"app": "web"})
    assert not constraint.selector.matches({"app": "db"})


def test_match_label_keys_add_the_pods_own_values() -> None:
    pod = _pod(
        _spread("zone", labelSelector={"matchLabels": {"app": "web"}}, matchLabelKeys=["rev", "x"]),
        labels={"app": "web", "rev": "2"},
    )
    (constraint,) = compile_spread_constraints(pod)
    assert constraint.selector.matches({"app": "web", "rev": "2"})
    assert not constraint.selector.matches({"app": "web", "rev": "1"})
    assert constraint.selector.describe() == "{app=web, rev=2}"


def test_match_label_keys_leave_a_null_selector_selecting_nothing() -> None:
    (constraint,) = compile_spread_constraints(
        _pod(_spread("zone", matchLabelKeys=["app"]), labels={"app": "web"})
    )
    assert constraint.selector.nothing


def test_an_opted_in_hostname_spread_is_read_on_the_host_key() -> None:
    spreads = (_spread("kubernetes.io/hostname"), _spread("zone"))
    plain = compile_spread_constraints(_pod(*spreads, labels={}))
    opted = compile_spread_constraints(_pod(*spreads, labels={}, opted_in=True))
    cluster_wide = compile_spread_constraints(_pod(*spreads, labels={}), "cluster-wide")
    assert [c.topology_key for c in plain] == ["kubernetes.io/hostname", "zone"]
    assert [c.topology_key for c in opted] == [LABEL_ESXI_HOST, "zone"]
    assert opted == cluster_wide
    assert opted[0].physical
    assert not plain[0].physical
    assert opted[0].declared_key == "kubernetes.io/hostname"
    assert "physical reading of kubernetes.io/hostname" in opted[0].describe()


def test_a_migration_targets_physical_spread_leaves_its_own_vm_out() -> None:
    """A KubeVirt migration target's hostname spread read on the host key counts neither its
    source nor itself; its VM's first start, and the spread read as written, count both."""
    vm = {"app": "db", "kubevirt.io/created-by": "uid-vmi-a"}
    target = {**vm, "kubevirt.io/migrationJobUID": "uid-migration-1"}
    written = _spread("kubernetes.io/hostname", labelSelector={"matchLabels": {"app": "db"}})
    (moved,) = compile_spread_constraints(_pod(written, labels=target, opted_in=True))
    assert moved.topology_key == LABEL_ESXI_HOST
    assert not moved.selector.matches(vm)  # the source, and the target itself
    assert moved.selector.matches({"app": "db", "kubevirt.io/created-by": "uid-vmi-b"})
    for labels, opted_in in ((vm, True), (target, False)):
        (kept,) = compile_spread_constraints(_pod(written, labels=labels, opted_in=opted_in))
        assert kept.selector.matches(vm)


HOST = LABEL_ESXI_HOST
WEB = {"matchLabels": {"app": "web"}}


def _three_hosts() -> list[Node]:
    return [
        node(f"{host}{i}", {HOST: host, HOSTNAME_KEY: f"{host}{i}"})
        for host in "abc"
        for i in (1, 2)
    ]


def _web_on(*nodes: str) -> list[Pod]:
    return [pod(f"web{i}", labels={"app": "web"}, node_name=n) for i, n in enumerate(nodes)]


@pytest.mark.parametrize("mode", list(FilterMode))
def test_a_host_spread_sends_the_new_replica_to_the_empty_host(mode: FilterMode) -> None:
    """The issue's example: web 2 on host a, 1 on host b; maxSkew 1 leaves only host c."""
    decider = engine(_three_hosts(), _web_on("a1", "a2", "b1"))
    result = decider.filter(pod(labels={"app": "web"}, spreads=[spread(HOST, WEB)]), mode=mode)
    assert result.feasible == ["c1", "c2"]
    assert result.summary() == (
        "0/6 nodes are available: 4 node(s) didn't match pod topology spread constraints."
    )
    assert "esxi-host=a would hold the pod itself and 2 matching pod(s)" in (
        result.rejected["a1"].message
    )


def test_an_opted_in_hostname_spread_counts_hosts_not_nodes() -> None:
    """Read as written, one replica per node is balanced; read physically, host a is full."""
    decider = engine(_three_hosts(), _web_on("a1", "b1"))
    spreads = [spread(HOSTNAME_KEY, WEB)]
    as_written = decider.filter(pod(labels={"app": "web"}, spreads=spreads))
    opted_in = pod(
        labels={"app": "web"}, spreads=spreads, annotations={POD_PHYSICAL_ANTI_AFFINITY: "true"}
    )
    assert as_written.feasible == ["a2", "b2", "c1", "c2"]
    assert decider.filter(opted_in).feasible == ["c1", "c2"]
    assert decider.filter(opted_in, mode=FilterMode.PHYSICAL).feasible == ["c1", "c2"]
    # Physical mode leaves a spread over another key to kube-scheduler.
    assert decider.filter(
        pod(labels={"app": "web"}, spreads=spreads), mode=FilterMode.PHYSICAL
    ).feasible == ["a1", "a2", "b1", "b2", "c1", "c2"]


def test_nodes_without_the_key_fail_with_the_missing_label_reason() -> None:
    nodes = [*_three_hosts(), node("bare")]
    result = engine(nodes).filter(pod(labels={"app": "web"}, spreads=[spread(HOST, WEB)]))
    assert result.rejected["bare"].reason == (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )
    assert result.rejected["bare"].unresolvable
    assert len(result.feasible) == 6


def test_a_soft_host_spread_scores_the_emptier_hosts_higher() -> None:
    decider = engine(_three_hosts(), _web_on("a1", "a2", "b1"))
    incoming = pod(labels={"app": "web"}, spreads=[spread(HOST, WEB, when="ScheduleAnyway")])
    assert decider.filter(incoming).feasible == [n.metadata.name for n in _three_hosts()]
    scores = decider.score(incoming, ["a1", "b1", "c1"]).scores
    assert [scores[n].topology_spread for n in ("a1", "b1", "c1")] == [0, 33, 100]
    plain = decider.score(pod(labels={"app": "web"}), ["a1", "b1", "c1"])
    assert plain.max_total == 700  # PodTopologySpread skipped: its weight is not in the total


def test_a_placed_replica_sees_its_spread_violated_after_replicas_piled_on_one_host() -> None:
    placed = [pod(f"web{i}", labels={"app": "web"}, node_name=n, spreads=[spread(HOST, WEB)])
              for i, n in enumerate(("a1", "a2", "b1"))]  # fmt: skip
    decider = engine(_three_hosts(), placed)
    (standing,) = spread_standings(decider, placed[0])
    assert standing.state == "violated"
    assert (standing.global_min, standing.domains) == (0, 3)
    assert [(d.domain, d.matching, d.skew, d.refused) for d in standing.per_domain] == [
        ("a", 2, 2, False),
        ("b", 1, 1, False),
    ]
    assert "esxi-host=a holds 2 matching pod(s): skew 2 > maxSkew 1" in standing.why
    (other,) = spread_standings(decider, placed[2])
    assert other.state == "violated"  # the spread as a whole, whichever replica is asked


def test_a_pending_replica_sees_which_hosts_its_spread_refuses() -> None:
    decider = engine(_three_hosts(), _web_on("a1", "a2", "b1"))
    (standing,) = spread_standings(decider, pod(labels={"app": "web"}, spreads=[spread(HOST, WEB)]))
    assert standing.state == "not-placed"
    assert [(d.domain, d.skew, d.refused) for d in standing.per_domain] == [
        ("a", 3, True),
        ("b", 2, True),
    ]
    assert standing.why.endswith("refused: a, b")
    assert "1 of them without a matching pod" in standing.why
