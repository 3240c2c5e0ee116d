"""A cycle started only by changes judges only what they can put in violation, and misses none.

The property runs over seeded random clusters (tests/platform/builders/random_clusters.py):
after random changes (vMotions, pods assigned, relabelled or deleted, nodes relabelled or
re-tainted), each strategy with the changes' scope finds only violations a full pass finds, every
one the changes brought, and every one a changed pod is a candidate of.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from hostaffinity.descheduler.core.cycle import decide, next_scope
from hostaffinity.descheduler.core.eviction_planner import (
    EvictionLimits,
    EvictionPlanner,
    PlannerSettings,
)
from hostaffinity.descheduler.core.policy import Policy, Profile
from hostaffinity.descheduler.core.protections import DefaultEvictorArgs, Protections
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies import build_strategy
from hostaffinity.descheduler.core.strategies.base import Strategy, Violation
from hostaffinity.descheduler.core.strategies.scope import Scope, touched_pods
from hostaffinity.descheduler.core.triggers import node_scope
from tests.platform.builders.descheduler import (
    ESXI,
    NOW,
    anti_affinity,
    cluster,
    node,
    pod,
)
from tests.platform.builders.random_clusters import RandomCluster

ANTI = "RemovePodsViolatingInterPodAntiAffinity"
SPREAD = "RemovePodsViolatingTopologySpreadConstraint"
STRATEGIES: list[Strategy] = [
    build_strategy(ANTI, {}),
    build_strategy(ANTI, {"includePreferred": True}),
    build_strategy("RemovePodsViolatingInterPodAffinity", {}),
    build_strategy(
        "RemovePodsViolatingNodeAffinity",
        {
            "nodeAffinityType": [
                "requiredDuringSchedulingIgnoredDuringExecution",
                "preferredDuringSchedulingIgnoredDuringExecution",
            ]
        },
    ),
    build_strategy("RemovePodsViolatingNodeTaints", {"includePreferNoSchedule": True}),
]
Found = set[tuple[str, frozenset[str]]]


def _found(violations: list[Violation]) -> Found:
    """Violations by strategy and candidates (a pair's rule names whichever pod held it)."""
    return {(v.strategy, frozenset(v.candidates)) for v in violations}


def _full(state: ClusterState) -> Found:
    return set().union(*(_found(s.violations(state)) for s in STRATEGIES))


def _scoped(state: ClusterState, scope: Scope) -> Found:
    return set().union(*(_found(s.violations(state, scope)) for s in STRATEGIES))


@pytest.mark.parametrize("seed", range(40))
def test_a_scoped_pass_finds_what_the_changes_brought_and_nothing_a_full_pass_does_not(
    seed: int,
) -> None:
    rng = random.Random(seed)
    world = RandomCluster(rng)
    for _round in range(4):
        before = _full(world.state)
        scope, what = Scope(), []
        for _ in range(rng.randint(1, 3)):
            change, changed = world.change()
            scope.absorb(changed)
            what.append(change)
        after = _full(world.state)
        scoped = _scoped(world.state, scope)
        touched = {record.key for record in touched_pods(world.state, scope)}
        involving = {found for found in after if found[1] & touched}
        assert scoped <= after, (what, scoped - after)
        assert after - before <= scoped, (what, (after - before) - scoped)
        assert involving <= scoped, (what, involving - scoped)


def test_the_random_clusters_have_violations_to_find() -> None:
    """The property above is not vacuous: changes do bring new violations of each kind."""
    brought: set[str] = set()
    for seed in range(40):
        rng = random.Random(seed)
        world = RandomCluster(rng)
        for _round in range(4):
            before = _full(world.state)
            world.change()
            brought.update(strategy for strategy, _ in _full(world.state) - before)
    assert brought == {s.name for s in STRATEGIES}


SPREAD_ARGS = {"constraints": ["DoNotSchedule", "ScheduleAnyway"]}


@pytest.mark.parametrize("seed", range(80))
def test_the_spread_strategy_kept_between_changes_finds_what_a_fresh_one_finds(seed: int) -> None:
    """It unsettles only the groups the changed pods and nodes can unbalance (cordons
    included, which start no cycle): whatever it kept settled is still balanced. The moves come
    in the same order too (the planner takes them in order), whatever it learnt in between."""
    rng = random.Random(seed)
    world = RandomCluster(rng)
    kept = build_strategy(SPREAD, SPREAD_ARGS)
    kept.violations(world.state)
    for _round in range(6):
        what = [world.change()[0] for _ in range(rng.randint(1, 3))]
        found = _in_order(kept.violations(world.state))
        fresh = _in_order(build_strategy(SPREAD, SPREAD_ARGS).violations(world.state))
        assert found == fresh, what


# -- RemoveDuplicates keeps the crowded workloads between cycles ---------------------------------

DUPLICATES = "RemoveDuplicates"
DUPLICATES_ARGS: list[dict[str, Any]] = [
    {},
    {"domain": "esxi-host"},
    {"domain": "zone"},
    {"domain": "esxi-host", "labelSelector": {"matchLabels": {"tier": "x"}}},
]
# The changes that can crowd a workload, as change() describes them.
CROWDING = ("moved to", "assigned", "adopted", "relabelled", "vMotion", "placement", "added back")


def _in_order(violations: list[Violation]) -> list[tuple[str, tuple[str, ...]]]:
    return [(v.rule, v.candidates) for v in violations]


def _duplicates_rounds(seed: int) -> Iterator[tuple[str, list[Found], list[Found]]]:
    """One change per round over a random cluster: what it was, then per DUPLICATES_ARGS what
    the strategy kept since the first round finds scoped to the change (the Scope the feeds
    gather), and what a fresh one finds in a full pass (in order)."""
    rng = random.Random(seed)
    world = RandomCluster(rng)
    kept = [build_strategy(DUPLICATES, args) for args in DUPLICATES_ARGS]
    for strategy in kept:
        strategy.violations(world.state)
    for _round in range(8):
        what, scope = world.change()
        scoped = [_in_order(s.violations(world.state, scope)) for s in kept]
        fresh = [
            _in_order(build_strategy(DUPLICATES, args).violations(world.state))
            for args in DUPLICATES_ARGS
        ]
        yield what, scoped, fresh


@pytest.mark.parametrize("seed", range(60))
def test_duplicates_kept_between_changes_find_what_a_fresh_pass_finds(seed: int) -> None:
    """Every violation, in the same order (the planner takes them in order), whichever change
    crowded a workload: a pod moved next to a sibling, assigned or adopted (no cycle starts for
    an owner change: only the state's journal names it), a node moved to another host, its
    placement lost (its esxi-host label decides), relabelled, deleted and added back."""
    for what, scoped, fresh in _duplicates_rounds(seed):
        assert scoped == fresh, what


def test_the_random_changes_crowd_workloads_every_way() -> None:
    """The property above is not vacuous: each kind of change brings new duplicates, for the
    node domain and the host domain."""
    brought: set[tuple[str, str]] = set()
    domains = [args.get("domain", "node") for args in DUPLICATES_ARGS]
    for seed in range(60):
        before: list[Found] | None = None
        for what, _, fresh in _duplicates_rounds(seed):
            for domain, now, then in zip(domains, fresh, before or fresh, strict=True):
                if set(now) - set(then):
                    brought.update((domain, kind) for kind in CROWDING if kind in what)
            before = fresh
    assert {(domain, kind) for domain in ("node", "esxi-host") for kind in CROWDING} - brought <= {
        ("node", "vMotion"),
        ("node", "placement"),
    }


class JudgesAll:
    """A strategy that judges every pod whatever the scope, so that it plans the same moves,
    in the same order, in a scoped and in a full cycle (a closed scratch leaves the order a
    full pass reads the pods in as it was)."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.name = strategy.name
        self.triggers = strategy.triggers

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]:
        return self.strategy.violations(state)


def _duplicates_policy(*duplicates: Strategy) -> Policy:
    """Strategies that plan moves first (onto nodes that may hold a sibling), then duplicates."""
    earlier = [
        build_strategy("RemovePodsViolatingNodeTaints", {}),
        build_strategy(ANTI, {}),
    ]
    return _policy(*(JudgesAll(s) for s in earlier), *duplicates)


@pytest.mark.parametrize("seed", range(40))
def test_a_scoped_cycle_plans_what_a_full_one_plans_for_duplicates(seed: int) -> None:
    """Through the planner: the moves earlier strategies of the cycle planned (a pod planned
    onto a node of its sibling) count as a full pass counts them."""
    rng = random.Random(seed)
    world = RandomCluster(rng)

    def plan(policy: Policy, scope: Scope | None) -> list[tuple[str, str, str, str]]:
        planner = EvictionPlanner(PlannerSettings(), policy.limits)
        report = decide(world.state, policy, planner, NOW, scope)
        return [(a.pod, a.target, a.strategy, a.rule) for a in report.plan.actions]

    def duplicates() -> list[Strategy]:
        return [build_strategy(DUPLICATES, {"domain": d}) for d in ("node", "esxi-host")]

    kept = _duplicates_policy(*duplicates())
    plan(kept, None)
    for _round in range(6):
        what, scope = world.change()
        assert plan(kept, scope) == plan(_duplicates_policy(*duplicates()), None), what


# -- the scope is what a cycle after a vMotion judges -------------------------------------------

WEB = {"app": "web"}
DB = {"app": "db"}


def _moved_cluster() -> ClusterState:
    """Two hosts; a standing anti-affinity violation on esx-2 (db pods, untouched), and a web
    pod whose node n1 is about to be vMotioned onto esx-1, next to its replica on n2."""
    return cluster(
        [node(f"n{i}") for i in range(1, 7)],
        [
            pod("web-1", "n1", WEB, affinity=anti_affinity(WEB, ESXI), created_minutes_ago=5),
            pod("web-2", "n2", WEB, affinity=anti_affinity(WEB, ESXI), created_minutes_ago=9),
            pod("db-1", "n3", DB, owner=("ReplicaSet", "db"), affinity=anti_affinity(DB, ESXI)),
            pod(
                "db-2",
                "n4",
                DB,
                owner=("ReplicaSet", "db"),
                affinity=anti_affinity(DB, ESXI),
                created_minutes_ago=2,
            ),
        ],
        placements={
            "n1": "esx-0",
            "n2": "esx-1",
            "n3": "esx-2",
            "n4": "esx-2",
            "n5": "esx-3",
            "n6": "esx-4",
        },
    )


def _policy(*strategies: Strategy) -> Policy:
    profile = Profile("test", Protections(DefaultEvictorArgs()), strategies)
    return Policy((profile,), EvictionLimits())


def test_a_cycle_after_a_vmotion_judges_only_the_moved_nodes_pods() -> None:
    state = _moved_cluster()
    policy = _policy(build_strategy(ANTI, {}))
    planner = EvictionPlanner(PlannerSettings(), policy.limits)
    state.set_placement("n1", "esx-1")
    scoped = decide(state, policy, planner, NOW, node_scope("n1"))
    assert scoped.scope is not None
    assert [a.pod for a in scoped.plan.actions] == ["default/web-1"]  # the newer of the pair
    assert scoped.violations == 1  # the db pair on esx-2 was not judged
    full = decide(state, policy, EvictionPlanner(PlannerSettings(), policy.limits), NOW)
    assert full.violations == 2
    assert sorted(a.pod for a in full.plan.actions) == ["default/db-2", "default/web-1"]


def test_a_scoped_cycle_judges_again_what_the_last_one_left_alone() -> None:
    """A pair with nowhere to go is skipped; when a node is uncordoned elsewhere the next
    scoped cycle (its scope names only that node) judges the pair again and moves one."""
    state = cluster(
        [node("n1"), node("n2"), node("n3", unschedulable=True)],
        [
            pod("web-1", "n1", WEB, affinity=anti_affinity(WEB), created_minutes_ago=9),
            pod("web-2", "n1", WEB, affinity=anti_affinity(WEB), created_minutes_ago=5),
            pod("web-3", "n2", WEB, affinity=anti_affinity(WEB), created_minutes_ago=1),
        ],
    )
    policy = _policy(build_strategy(ANTI, {}))
    planner = EvictionPlanner(PlannerSettings(), policy.limits)
    first = decide(state, policy, planner, NOW, next_scope(Scope(), None, planner, state))
    assert first.scope is None  # the first cycle judges every pod
    assert not first.plan.actions
    assert first.plan.skipped
    state.upsert_node(node("n3"))
    assert not decide(state, policy, planner, NOW, node_scope("n3")).plan.actions  # n3 is empty
    scope = next_scope(node_scope("n3"), first, planner, state)
    assert scope is not None
    assert scope.pods == {"default/web-1", "default/web-2"}
    second = decide(state, policy, planner, NOW, scope)
    assert [(a.pod, a.target) for a in second.plan.actions] == [("default/web-2", "n3")]
