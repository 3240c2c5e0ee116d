"""How a pod's topology spreads stand: matching pods per domain and the skew each domain has.

For a placed pod the spread is read as it stands now, the pod counted where it runs: it is
violated when its fullest domain exceeds the global minimum by more than maxSkew (what the
descheduler's RemovePodsViolatingTopologySpreadConstraint repairs). For a pod on no node each
domain's skew is the one placing the pod there would make, exactly as the filter judges it
(spread_filtering.py), and `refused` marks the domains a DoNotSchedule spread refuses.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.spread_filtering import prefilter_counts
from hostaffinity.affinity.topology_spread import NodeInclusion, SpreadConstraint

SpreadState = Literal["holds", "violated", "unknown", "not-placed"]
_SHOWN_DOMAINS: Final = 20  # an explanation lists the fullest domains, not thousands of nodes


class DomainSkew(msgspec.Struct, frozen=True):
    """One domain of a spread: its matching pods and the skew over the global minimum."""

    domain: str
    matching: int
    skew: int
    refused: bool = False


class SpreadStanding(msgspec.Struct, frozen=True):
    """One of the pod's spreads: the eligible domains, the global minimum, the fullest domains
    (`per_domain`, most matching pods first, at most 20) and what that means for the pod."""

    constraint: SpreadConstraint
    state: SpreadState
    global_min: int
    domains: int
    per_domain: list[DomainSkew]
    why: str


def spread_standings(engine: AffinityEngine, pod: Pod) -> list[SpreadStanding]:
    """Every topology spread of the pod (its own, else the profile's defaults), in order."""
    index = engine.index
    placed = index.pod(pod.key) is not None
    inclusion = NodeInclusion(index, pod)
    found = []
    for constraint in engine.spreads(pod):
        (counts,) = prefilter_counts(
            index, pod, [constraint], inclusion, include_self=placed
        ).values()
        low = counts.min_match(constraint)
        itself = 0 if placed else int(constraint.selector.matches(pod.metadata.labels))
        ranked = sorted(counts.counts.items(), key=lambda item: (-item[1], item[0]))
        per_domain = [
            DomainSkew(
                domain,
                matching,
                matching + itself - low,
                not placed and constraint.hard and matching + itself - low > constraint.max_skew,
            )
            for domain, matching in ranked[:_SHOWN_DOMAINS]
        ]
        found.append(_stand(engine, pod, constraint, placed, low, counts.domains, per_domain))
    return found


def _stand(
    engine: AffinityEngine,
    pod: Pod,
    constraint: SpreadConstraint,
    placed: bool,
    low: int,
    domains: int,
    per_domain: list[DomainSkew],
) -> SpreadStanding:
    key = constraint.topology_key
    empty = max(domains - len(per_domain), 0)
    base = f"{domains} eligible {key} domain(s), global minimum {low}"
    if empty and per_domain:
        base += f", {empty} of them without a matching pod"
    if not placed:
        refused = [d.domain for d in per_domain if d.refused]
        why = base + (f"; refused: {', '.join(refused)}" if refused else "")
        return SpreadStanding(constraint, "not-placed", low, domains, per_domain, why)
    here = engine.index.domain(pod.spec.node_name, key)
    if here is None:
        why = f"the pod's node {pod.spec.node_name} has no {key} domain"
        return SpreadStanding(constraint, "unknown", low, domains, per_domain, why)
    fullest = per_domain[0] if per_domain else None
    if fullest is not None and fullest.skew > constraint.max_skew:
        why = (
            f"{base}; {key}={fullest.domain} holds {fullest.matching} matching pod(s): "
            f"skew {fullest.skew} > maxSkew {constraint.max_skew}"
        )
        return SpreadStanding(constraint, "violated", low, domains, per_domain, why)
    why = f"{base}; no domain's skew exceeds maxSkew {constraint.max_skew} (the pod is in {here})"
    return SpreadStanding(constraint, "holds", low, domains, per_domain, why)
