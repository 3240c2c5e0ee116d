"""Apartness between VMs as DRS anti-affinity rules that never ask for more than the pods did.

A DRS VM-VM anti-affinity rule keeps *every pair* of its VMs on different hosts, so a rule may
only hold VMs that are pairwise apart in the constraint graph: a clique. Self-anti-affine
replicas are one clique (the seed their shared term gives); a pod kept apart from two pods that
may share a host gives two pairs, never a triangle. Every edge ends up in some clique; cliques
contained in another are dropped, since the larger rule already says it, and the larger one
stands for them too. Of cliques with the same VMs (two workloads spread over the same node VMs),
one whose rule exists already is kept: a group arriving with a smaller key must not rename it.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Clique:
    """VMs that must be pairwise apart; `key` names the group it stands for (stable over time),
    `covered` the cliques dropped because this one holds all their VMs."""

    key: str
    vms: frozenset[str]
    covered: tuple["Clique", ...] = ()


def _never(_key: str) -> bool:
    return False


def edge(a: str, b: str) -> tuple[str, str]:
    """An undirected edge as a sorted pair."""
    return (a, b) if a < b else (b, a)


def cover_with_cliques(
    edges: Iterable[tuple[str, str]],
    seeds: Mapping[str, frozenset[str]],
    exists: Callable[[str], bool] = _never,
) -> list[Clique]:
    """Cliques whose pairs are exactly edges and which together cover every edge.

    `seeds` are groups believed pairwise apart (one per shared term), tried first so that a
    replica set keeps one rule under one name; a seed pair that is not an edge is not trusted
    and the seed is shrunk to what is. The rest of the edges are covered greedily, in sorted
    order, each grown into a maximal clique. `exists` says whether a key's rule exists already.
    """
    adjacent: dict[str, set[str]] = {}
    uncovered: set[tuple[str, str]] = set()
    for a, b in edges:
        if a == b:
            continue
        adjacent.setdefault(a, set()).add(b)
        adjacent.setdefault(b, set()).add(a)
        uncovered.add(edge(a, b))
    cliques: list[Clique] = []
    for key in sorted(seeds):
        members = _clique_within(sorted(seeds[key]), adjacent)
        if len(members) >= 2:
            cliques.append(Clique(key, frozenset(members)))
            uncovered.difference_update(_pairs(members))
    for a, b in sorted(uncovered):
        if (a, b) not in uncovered:
            continue
        members = [a, b]
        for candidate in sorted(adjacent[a] & adjacent[b]):
            if all(candidate in adjacent[m] for m in members):
                members.append(candidate)
        cliques.append(Clique("vms:" + ",".join(sorted(members)), frozenset(members)))
        uncovered.difference_update(_pairs(members))
    return _without_contained(cliques, exists)


def _clique_within(candidates: list[str], adjacent: Mapping[str, set[str]]) -> list[str]:
    members: list[str] = []
    for vm in candidates:
        if all(vm in adjacent.get(m, ()) for m in members):
            members.append(vm)
    return members


def _pairs(members: list[str]) -> set[tuple[str, str]]:
    return {edge(a, b) for i, a in enumerate(members) for b in members[i + 1 :]}


def _without_contained(cliques: list[Clique], exists: Callable[[str], bool]) -> list[Clique]:
    """Drop a clique equal to or inside another, which then covers it: a larger one first; of
    equal ones, one whose rule exists, then the smallest key."""
    rank = {id(c): (-len(c.vms), not exists(c.key), c.key) for c in cliques}  # lower: kept
    by_vm: dict[str, list[Clique]] = {}
    for clique in cliques:
        for vm in clique.vms:
            by_vm.setdefault(vm, []).append(clique)
    # Per clique, the others holding all its VMs.
    holders = {
        id(clique): [
            other
            for other in by_vm[min(clique.vms)]
            if other is not clique and clique.vms <= other.vms
        ]
        for clique in cliques
    }
    dropped = {
        id(clique)
        for clique in cliques
        if any(rank[id(other)] < rank[id(clique)] for other in holders[id(clique)])
    }
    covered: dict[int, list[Clique]] = {}
    for clique in cliques:
        if id(clique) in dropped:
            for holder in holders[id(clique)]:
                if id(holder) not in dropped:
                    covered.setdefault(id(holder), []).append(clique)
    kept = [
        Clique(clique.key, clique.vms, tuple(covered.get(id(clique), ())))
        for clique in cliques
        if id(clique) not in dropped
    ]
    return sorted(kept, key=lambda c: c.key)
