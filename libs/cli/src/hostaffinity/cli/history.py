"""Which events on the stream are about one pod or one node, each in one line of words.

A pod is found by name or uid. Its admission (`pod.mutated`) is the exception: a pod made from a
template has no name yet when the webhook sees it, so the event names its generateName, and the
admission taken is the one of that generateName nearest the pod's creation (admission precedes
creation by milliseconds; `ADMISSION_WINDOW` allows for clock skew between the two).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from hostaffinity.cli.leases import parse_time
from hostaffinity.schema import (
    DrsRuleHeld,
    DrsRulesApplied,
    ExtenderDecision,
    NodeLabelled,
    NodePlaced,
    NodeUnmatched,
    PodEvicted,
    PodMutated,
    TopologyEvent,
    VmiMigrationRequested,
    VmMoved,
    event_type_of,
)
from hostaffinity.schema.reports import HistoryEntry

POD_EVENT_TYPES: Final = (
    "pod.mutated",
    "extender.decision",
    "drs.rules.applied",
    "drs.rule.held",
    "pod.evicted",
    "vmi.migration.requested",
)
# The events about a node: the classes pick them, their types read them from the stream.
NODE_EVENTS: Final = (
    VmMoved,
    NodePlaced,
    NodeLabelled,
    NodeUnmatched,
    PodEvicted,
    VmiMigrationRequested,
)
NODE_EVENT_TYPES: Final = tuple(event_type_of(message) for message in NODE_EVENTS)
ADMISSION_WINDOW: Final = (timedelta(seconds=-30), timedelta(seconds=2))
# The descheduler's intent, stored before each eviction or migration attempt: a line of its own
# only while no answer of the same pod follows it (what came of it is not known).
INTENT: Final = "requested"


@dataclass(frozen=True)
class PodIdentity:
    """How events may name a pod: `key` (namespace/name), `uid`, and for its admission the
    `generate_name` and `created_at` of its API object."""

    key: str
    uid: str = ""
    generate_name: str = ""
    created_at: str = ""


def pod_history(
    events: Sequence[TopologyEvent], pod: PodIdentity, drs_rules: Collection[str]
) -> list[HistoryEntry]:
    """The events about the pod, oldest first; `drs_rules` are the names of the DRS rules and
    groups whose ownership records name it (their `drs.rules.applied` count)."""
    found = [event for event in events if _about_pod(event, pod, drs_rules)]
    admission = _admission(events, pod)
    if admission is not None:
        found.append(admission)
    return _entries(_unanswered(found))


def node_history(events: Sequence[TopologyEvent], node: str) -> list[HistoryEntry]:
    """The events about the node and the pods moved off it, oldest first."""
    return _entries(
        _unanswered([e for e in events if isinstance(e, NODE_EVENTS) and e.node == node])
    )


def _unanswered(events: list[TopologyEvent]) -> list[TopologyEvent]:
    """The events (in stream order) without the descheduler's intents that an answer followed."""
    answered: set[int] = set()
    open_intents: dict[tuple[type, str], int] = {}
    for index, event in enumerate(events):
        if isinstance(event, PodEvicted | VmiMigrationRequested):
            key = (type(event), event.pod_uid)
            if event.result == INTENT:
                open_intents[key] = index
            elif key in open_intents:
                answered.add(open_intents.pop(key))
    return [event for index, event in enumerate(events) if index not in answered]


def _about_pod(event: TopologyEvent, pod: PodIdentity, drs_rules: Collection[str]) -> bool:
    match event:
        case PodMutated():
            return event.pod == pod.key
        case ExtenderDecision() | PodEvicted():
            return event.pod == pod.key or (bool(pod.uid) and event.pod_uid == pod.uid)
        case VmiMigrationRequested():
            return event.pod == pod.key
        case DrsRulesApplied():
            return any(n in drs_rules for n in (*event.added, *event.edited, *event.removed))
        case DrsRuleHeld():
            return event.name in drs_rules
    return False


def _admission(events: Sequence[TopologyEvent], pod: PodIdentity) -> PodMutated | None:
    """The template admission nearest the pod's creation, within the window."""
    if not (pod.generate_name and pod.created_at):
        return None
    namespace = pod.key.split("/", 1)[0]
    template = f"{namespace}/{pod.generate_name}"
    created = parse_time(pod.created_at)
    earliest, latest = ADMISSION_WINDOW
    candidates = [
        (abs(parse_time(e.occurred_at) - created), e)
        for e in events
        if isinstance(e, PodMutated)
        and e.pod == template
        and created + earliest <= parse_time(e.occurred_at) <= created + latest
    ]
    return min(candidates, key=lambda pair: pair[0])[1] if candidates else None


def _entries(events: list[TopologyEvent]) -> list[HistoryEntry]:
    """In time order; hosts and clusters named `<vcenter>/<name>` when the events name several
    vCenters (names and moids repeat across them)."""
    ordered = sorted(events, key=lambda e: parse_time(e.occurred_at))
    several = len({vcenter for e in events if (vcenter := getattr(e, "vcenter", ""))}) > 1
    return [
        HistoryEntry(
            at=e.occurred_at,
            type=event_type(e),
            source=e.source,
            summary=summary(e, qualified=several),
        )
        for e in ordered
    ]


def event_type(event: TopologyEvent) -> str:
    """The tag the event is published under, e.g. `vm.moved`."""
    return str(event.__struct_config__.tag)


def summary(event: TopologyEvent, *, qualified: bool = False) -> str:
    """The event in words: what was done, to what, and why; `qualified`: its hosts and clusters
    as `<vcenter>/<name>`."""
    vcenter = str(getattr(event, "vcenter", "")) if qualified else ""

    def at(name: str) -> str:
        return f"{vcenter}/{name}" if vcenter else name

    match event:
        case PodMutated():
            added = [
                f"{event.twins} hostname anti-affinity term(s) given the ESXi-host key"
                if event.twins
                else "",
                "a required ESXi-host label" if event.host_label_required else "",
                "spread across ESXi hosts" if event.spread_added else "",
            ]
            what = ", ".join(a for a in added if a) or "nothing changed"
            return f"mutated at admission as {event.pod}: {what}"
        case ExtenderDecision():
            rejected = ", ".join(f"{n} {reason}" for reason, n in sorted(event.rejections.items()))
            return (
                f"extender {event.verb}: {event.outcome}, {event.nodes_passed}/{event.nodes_asked}"
                f" nodes passed"
                + (f" ({rejected})" if rejected else "")
                + (f", node {event.node}" if event.node else "")
            )
        case DrsRulesApplied():
            changes = [
                f"{verb} {', '.join(names)}"
                for verb, names in (
                    ("added", event.added),
                    ("edited", event.edited),
                    ("removed", event.removed),
                )
                if names
            ]
            plan = " (dry run: planned only)" if event.dry_run else ""
            return f"DRS rules in cluster {at(event.cluster_moid)}: {'; '.join(changes)}{plan}"
        case DrsRuleHeld():
            return f"DRS rule {event.name} in cluster {at(event.cluster_moid)}: {event.message}"
        case PodEvicted():
            return f"{event.result} from node {event.node} by {event.strategy}: {event.rule}"
        case VmiMigrationRequested():
            return (
                f"live migration {event.migration} of VMI {event.vmi} off node {event.node} "
                f"requested by {event.strategy}: {event.rule}"
            )
        case VmMoved():
            return (
                f"VM {event.vm_moid} moved from {at(event.from_host_name)} to "
                f"{at(event.to_host_name)}"
            )
        case NodePlaced():
            return (
                f"placed: VM {event.vm_moid} on {at(event.host_name)} in cluster "
                f"{event.cluster_name} "
                f"(matched by {event.matched_by})"
            )
        case NodeLabelled():
            labels = ", ".join(f"{k}={v}" for k, v in sorted(event.labels.items()))
            return f"labelled {labels}"
        case NodeUnmatched():
            return f"not matched to a VM: {event.reason}"
    return event_type(event)  # the types neither history shows
