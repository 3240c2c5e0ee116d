"""`hostaffinity explain`'s history: which events are about a pod or a node, each in words."""

from __future__ import annotations

import msgspec

from hostaffinity.cli.history import NODE_EVENT_TYPES, PodIdentity, node_history, pod_history
from hostaffinity.schema import (
    DrsRulesApplied,
    NodeLabelled,
    PodEvicted,
    PodMutated,
    TopologyEvent,
)
from hostaffinity.schema.reports import HistoryEntry
from tests.platform.bus_values import vm_moved


def _evicted(
    at: str, pod: str = "shop/web-1", uid: str = "uid-1", result: str = "evicted"
) -> PodEvicted:
    return PodEvicted(
        id=f"evicted-{at}-{result}",
        occurred_at=at,
        source="descheduler",
        pod=pod,
        pod_uid=uid,
        node="worker-1",
        strategy="RemovePodsViolatingInterPodAntiAffinity",
        rule="apart from app=web",
        result=result,
    )


def _mutated(at: str, pod: str) -> PodMutated:
    return PodMutated(
        id=f"mutated-{at}", occurred_at=at, source="admission-webhook", pod=pod,
        request_uid="r", twins=1, spread_added=True,
    )  # fmt: skip


def test_a_node_s_history_is_its_own_events_oldest_first_in_words() -> None:
    labelled = NodeLabelled(
        id="l", occurred_at="2026-11-25T10:00:02Z", source="node-labeller", node="worker-1",
        labels={"hostaffinity.io/esxi-host": "esx-b"}, version=1,
    )  # fmt: skip
    events: list[TopologyEvent] = [
        labelled,
        vm_moved("worker-1", "esx-a", "esx-b", at="2026-11-25T10:00:01Z"),
        vm_moved("worker-2", "esx-a", "esx-b", at="2026-11-25T10:00:00Z"),
        _evicted("2026-11-25T10:00:03Z"),
    ]
    assert node_history(events, "worker-1") == [
        HistoryEntry(
            at="2026-11-25T10:00:01Z",
            type="vm.moved",
            source="node-labeller",
            summary="VM vm-worker-1 moved from esx-a to esx-b",
        ),
        HistoryEntry(
            at="2026-11-25T10:00:02Z",
            type="node.labelled",
            source="node-labeller",
            summary="labelled hostaffinity.io/esxi-host=esx-b",
        ),
        HistoryEntry(
            at="2026-11-25T10:00:03Z",
            type="pod.evicted",
            source="descheduler",
            summary="evicted from node worker-1 by RemovePodsViolatingInterPodAntiAffinity: "
            "apart from app=web",
        ),
    ]


def test_events_of_several_vcenters_name_hosts_with_their_vcenter() -> None:
    """Host names repeat across vCenters: a history that spans two says which host it means."""
    moves = [
        msgspec.structs.replace(
            vm_moved("worker-1", "esx-1", "esx-2", at=f"2026-11-25T10:00:0{n}Z", version=n),
            vcenter=vcenter,
        )
        for n, vcenter in ((1, "vc-a"), (2, "vc-b"))
    ]
    assert [entry.summary for entry in node_history(moves, "worker-1")] == [
        "VM vm-worker-1 moved from vc-a/esx-1 to vc-a/esx-2",
        "VM vm-worker-1 moved from vc-b/esx-1 to vc-b/esx-2",
    ]
    assert (
        node_history(moves[:1], "worker-1")[0].summary == "VM vm-worker-1 moved from esx-1 to esx-2"
    )


def test_node_event_types_are_those_of_the_node_events() -> None:
    assert NODE_EVENT_TYPES == (
        "vm.moved",
        "node.placed",
        "node.labelled",
        "node.unmatched",
        "pod.evicted",
        "vmi.migration.requested",
    )


def test_a_pod_is_found_by_name_or_by_uid_and_by_the_drs_rules_that_name_it() -> None:
    rules = DrsRulesApplied(
        id="d", occurred_at="2026-11-25T10:00:05Z", source="drs-translator", vcenter="vc",
        cluster_moid="domain-c1", added=["hostaffinity-anti-web"],
    )  # fmt: skip
    other_rules = DrsRulesApplied(
        id="o", occurred_at="2026-11-25T10:00:06Z", source="drs-translator", vcenter="vc",
        cluster_moid="domain-c1", removed=["hostaffinity-anti-db"],
    )  # fmt: skip
    events: list[TopologyEvent] = [
        _evicted("2026-11-25T10:00:04Z", pod="shop/renamed", uid="uid-1"),
        _evicted("2026-11-25T10:00:03Z", pod="shop/web-1", uid="uid-other"),
        _evicted("2026-11-25T10:00:02Z", pod="shop/web-2", uid="uid-2"),
        rules,
        other_rules,
    ]
    found = pod_history(
        events, PodIdentity(key="shop/web-1", uid="uid-1"), drs_rules={"hostaffinity-anti-web"}
    )
    assert [(entry.at, entry.type) for entry in found] == [
        ("2026-11-25T10:00:03Z", "pod.evicted"),
        ("2026-11-25T10:00:04Z", "pod.evicted"),
        ("2026-11-25T10:00:05Z", "drs.rules.applied"),
    ]
    assert found[-1].summary == "DRS rules in cluster domain-c1: added hostaffinity-anti-web"


def test_a_templated_pod_s_admission_is_the_one_nearest_its_creation_within_the_window() -> None:
    pod = PodIdentity(
        key="shop/web-abcde", generate_name="web-", created_at="2026-11-25T10:00:00.500Z"
    )
    events: list[TopologyEvent] = [
        _mutated("2026-11-25T09:59:00Z", "shop/web-"),  # before the window
        _mutated("2026-11-25T10:00:00.400Z", "shop/web-"),  # nearest
        _mutated("2026-11-25T10:00:00.100Z", "shop/web-"),
        _mutated("2026-11-25T10:00:00.450Z", "other/web-"),  # another namespace
    ]
    (admission,) = pod_history(events, pod, drs_rules=())
    assert admission.at == "2026-11-25T10:00:00.400Z"
    assert admission.summary == (
        "mutated at admission as shop/web-: 1 hostname anti-affinity term(s) given the "
        "ESXi-host key, spread across ESXi hosts"
    )


def test_without_its_creation_time_no_admission_is_guessed() -> None:
    events: list[TopologyEvent] = [_mutated("2026-11-25T10:00:00Z", "shop/web-")]
    assert pod_history(events, PodIdentity(key="shop/web-abcde", generate_name="web-"), ()) == []


def test_an_intent_shows_only_while_no_outcome_answers_it() -> None:
    """The descheduler's `requested` before each eviction: one line with its outcome, the
    intent's own line only when no outcome followed (what came of it is not known)."""
    pod = PodIdentity(key="shop/web-1", uid="uid-1")
    answered = [
        _evicted("2026-11-25T10:00:00Z", result="requested"),
        _evicted("2026-11-25T10:00:01Z"),
    ]
    assert [e.summary.split()[0] for e in pod_history(answered, pod, ())] == ["evicted"]
    alone = [_evicted("2026-11-25T10:00:00Z", result="requested")]
    assert [e.summary.split()[0] for e in pod_history(alone, pod, ())] == ["requested"]
    again = [
        _evicted("2026-11-25T10:00:00Z", result="requested"),
        _evicted("2026-11-25T10:00:01Z", result="blocked"),
        _evicted("2026-11-25T10:00:02Z", result="requested"),
    ]
    assert [e.summary.split()[0] for e in pod_history(again, pod, ())] == ["blocked", "requested"]
