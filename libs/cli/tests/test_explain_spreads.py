"""`hostaffinity explain pod` shows each topology spread with its skew per domain."""

from __future__ import annotations

from hostaffinity.cli.explain import render_pod
from hostaffinity.schema.reports import Location, PodExplanation, SpreadDomain, SpreadView


def test_a_pending_pod_lists_its_spread_and_the_hosts_it_refuses() -> None:
    spread = SpreadView(
        rule="{app=web} over hostaffinity.io/esxi-host, maxSkew 1, DoNotSchedule",
        host_level=True,
        when_unsatisfiable="DoNotSchedule",
        max_skew=1,
        state="not-placed",
        global_min=0,
        domains=3,
        per_domain=[
            SpreadDomain(domain="a", matching=2, skew=3, refused=True),
            SpreadDomain(domain="b", matching=1, skew=2, refused=True),
        ],
        why="3 eligible hostaffinity.io/esxi-host domain(s), global minimum 0; refused: a, b",
    )
    report = PodExplanation(
        pod="default/web-4",
        phase="Pending",
        concerned=True,
        location=Location(node=""),
        terms=[],
        feasible_nodes=["c1"],
        refusals=[],
        summary="1 node(s) fit",
        drs_rules=[],
        history=[],
        spreads=[spread],
    )
    text = render_pod(report)
    assert (
        "topology spreads:\n"
        "  [not-placed] topology spread (host-level): {app=web} over hostaffinity.io/esxi-host, "
        "maxSkew 1, DoNotSchedule\n"
        "      3 eligible hostaffinity.io/esxi-host domain(s), global minimum 0; refused: a, b\n"
        "      matching pods per domain: a: 2 (skew 3, refused), b: 1 (skew 2, refused)"
    ) in text
