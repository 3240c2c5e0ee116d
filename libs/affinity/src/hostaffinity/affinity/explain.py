"""Why a node was rejected: kube-scheduler's reason, plus a sentence a person can act on.

`reason` is kube-scheduler's own status reason (so results aggregate into the familiar
"0/N nodes are available: ..." line, see `fit_error_message`); `message` names the rule and the
pod or taint behind it. Strings are the plugins' at v1.36: interpodaffinity/filtering.go,
nodeaffinity/node_affinity.go, tainttoleration/taint_toleration.go, podtopologyspread/plugin.go,
nodeunschedulable/node_unschedulable.go, and framework/types.go (FitError.Error).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from hostaffinity.affinity.index import PodRecord
from hostaffinity.affinity.interpod import AffinityTerm
from hostaffinity.affinity.model import Taint
from hostaffinity.affinity.nodeaffinity import RequiredNodeAffinity
from hostaffinity.affinity.taints import describe_taint
from hostaffinity.affinity.topology_spread import SpreadConstraint

NODE_UNSCHEDULABLE: Final = "NodeUnschedulable"
TAINT_TOLERATION: Final = "TaintToleration"
NODE_AFFINITY: Final = "NodeAffinity"
INTER_POD_AFFINITY: Final = "InterPodAffinity"
POD_TOPOLOGY_SPREAD: Final = "PodTopologySpread"
# Rejections kube-scheduler has no word for: a node the engine has not seen, or one whose ESXi
# host is unknown when the caller asked such nodes to fail physical terms.
HOST_AFFINITY: Final = "HostAffinity"

REASON_UNSCHEDULABLE: Final = "node(s) were unschedulable"
REASON_TAINT: Final = "node(s) had untolerated taint(s)"
REASON_NODE_AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"
REASON_NODE_NAMES: Final = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
REASON_NODE_NAMES_CONFLICT: Final = "pod affinity terms conflict"
REASON_AFFINITY: Final = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY: Final = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_SPREAD: Final = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_MISSING_LABEL: Final = REASON_SPREAD + " (missing required label)"
REASON_UNKNOWN_NODE: Final = "node(s) unknown to hostaffinity"
REASON_UNPLACED: Final = "node(s) had no known ESXi host"


class Rejection(msgspec.Struct, frozen=True):
    """Why one node (or every node sharing the cause) failed the filter.

    `unresolvable` mirrors kube-scheduler's UnschedulableAndUnresolvable: evicting pods from
    the node would not help, so preemption and the descheduler should not try.
    """

    plugin: str
    reason: str
    unresolvable: bool
    message: str


def unknown_node() -> Rejection:
    return Rejection(
        HOST_AFFINITY,
        REASON_UNKNOWN_NODE,
        True,
        "the node is not in the engine's cache yet (no Node event seen for it)",
    )


def node_names(names: frozenset[str]) -> Rejection:
    """Nodes left out by NodeAffinity's PreFilter (`matchFields metadata.name In`)."""
    if not names:
        return Rejection(
            NODE_AFFINITY,
            REASON_NODE_NAMES_CONFLICT,
            True,
            "the pod's required node affinity terms name conflicting metadata.name values, "
            "so no node can match",
        )
    return Rejection(
        NODE_AFFINITY,
        REASON_NODE_NAMES,
        True,
        "the pod's required node affinity only allows the nodes named by matchFields "
        f"metadata.name: [{', '.join(sorted(names))}]",
    )


def cordoned() -> Rejection:
    return Rejection(
        NODE_UNSCHEDULABLE,
        REASON_UNSCHEDULABLE,
        True,
        "the node is cordoned (spec.unschedulable) and the pod does not tolerate "
        "node.kubernetes.io/unschedulable:NoSchedule",
    )


def untolerated_taint(taint: Taint) -> Rejection:
    return Rejection(
        TAINT_TOLERATION,
        REASON_TAINT,
        True,
        f"the node has taint {describe_taint(taint)} and the pod has no toleration for it",
    )


def node_affinity(required: RequiredNodeAffinity) -> Rejection:
    return Rejection(
        NODE_AFFINITY,
        REASON_NODE_AFFINITY,
        True,
        f"the node's labels do not satisfy the pod's {required.describe()}",
    )


def unplaced(key: str) -> Rejection:
    return Rejection(
        HOST_AFFINITY,
        REASON_UNPLACED,
        True,
        f"the node's ESXi host is unknown (no placement and no {key} label), so the pod's "
        "host-level rules cannot be checked on it",
    )


def affinity_missing_key(term: AffinityTerm) -> Rejection:
    return Rejection(
        INTER_POD_AFFINITY,
        REASON_AFFINITY,
        True,
        f"the node has no {term.topology_key} domain, which the pod's required pod affinity "
        f"term {term.describe()} needs",
    )


def affinity_unmatched(term: AffinityTerm) -> Rejection:
    return Rejection(
        INTER_POD_AFFINITY,
        REASON_AFFINITY,
        True,
        f"no pod matching the pod's required pod affinity term {term.describe()} runs in the "
        f"node's {term.topology_key} domain",
    )


def anti_affinity(term: AffinityTerm, culprit: PodRecord, domain: str) -> Rejection:
    return Rejection(
        INTER_POD_AFFINITY,
        REASON_ANTI_AFFINITY,
        False,
        f"pod {culprit.key} (on node {culprit.node}) matches the pod's required anti-affinity "
        f"term {term.describe()} and is in the node's domain {term.topology_key}={domain}",
    )


def existing_anti_affinity(term: AffinityTerm, owner: PodRecord, domain: str) -> Rejection:
    return Rejection(
        INTER_POD_AFFINITY,
        REASON_EXISTING_ANTI_AFFINITY,
        False,
        f"pod {owner.key} (on node {owner.node}) has a required anti-affinity term "
        f"{term.describe()} that matches this pod, and the node is in its domain "
        f"{term.topology_key}={domain}",
    )


def spread_missing_label(constraint: SpreadConstraint) -> Rejection:
    return Rejection(
        POD_TOPOLOGY_SPREAD,
        REASON_SPREAD_MISSING_LABEL,
        True,
        f"the node has no {constraint.topology_key} domain, which the pod's topology spread "
        f"constraint {constraint.describe()} needs",
    )


def spread_skew(
    constraint: SpreadConstraint,
    domain: str,
    matching: int,
    itself: int,
    global_min: int,
    described: str = "",
) -> Rejection:
    """A domain that already holds too many of the spread's pods (`described`: the
    constraint's description, when the caller has it already)."""
    skew = matching + itself - global_min
    counted = "the pod itself and " if itself else ""
    return Rejection(
        POD_TOPOLOGY_SPREAD,
        REASON_SPREAD,
        False,
        f"the node's domain {constraint.topology_key}={domain} would hold {counted}{matching} "
        f"matching pod(s) against a global minimum of {global_min}: skew {skew} > maxSkew "
        f"{constraint.max_skew} of the pod's topology spread constraint "
        f"{described or constraint.describe()}",
    )


def fit_error_message(
    total: int, rejected: Mapping[str, Rejection], extra: Iterable[tuple[str, int]] = ()
) -> str:
    """kube-scheduler's summary: `0/N nodes are available: <count> <reason>, ....`

    Reasons are counted per node and the "<count> <reason>" strings sorted as strings, as
    FitError.Error does; `extra` adds counts from elsewhere (an extender's rejections).
    """
    counts = Counter(r.reason for r in rejected.values())
    counts.update(dict(extra))
    parts = sorted(f"{count} {reason}" for reason, count in counts.items() if count)
    return f"0/{total} nodes are available: {', '.join(parts)}."
