"""Events: one tagged union, deterministic ids, old readers survive new writers."""

import json

import msgspec
import pytest

from hostaffinity.schema import (
    EVENT_MESSAGES,
    EVENT_TYPES,
    DrsRuleConflict,
    DrsRuleDrift,
    DrsRuleHeld,
    DrsRulesApplied,
    ExtenderDecision,
    NodeLabelled,
    NodePlaced,
    NodeUnmatched,
    PodEvicted,
    PodMutated,
    VmiMigrationRequested,
    VmMoved,
    decode_event,
    encode_event,
    event_id,
    event_subject,
)

COMMON = {"id": "e1", "occurred_at": "2026-11-22T08:00:00.000000Z", "source": "node-labeller"}
EXAMPLES = [
    VmMoved(
        **COMMON,
        node="worker-1",
        vm_moid="vm-42",
        from_host_moid="host-1",
        from_host_name="esx-1",
        to_host_moid="host-2",
        to_host_name="esx-2",
        version=7,
    ),
    NodePlaced(
        **COMMON,
        node="worker-1",
        vm_moid="vm-42",
        host_moid="host-1",
        host_name="esx-1",
        cluster_name="C0",
        datacenter="DC0",
        matched_by="providerID",
        version=1,
    ),
    NodeLabelled(
        **COMMON, node="worker-1", labels={"hostaffinity.io/esxi-host": "esx-1"}, version=1
    ),
    NodeUnmatched(**COMMON, node="worker-9", reason="no VM matches", candidates=["vm-1", "vm-2"]),
    PodEvicted(
        **COMMON,
        pod="shop/web-1",
        pod_uid="u1",
        node="worker-1",
        strategy="RemovePodsViolatingInterPodAntiAffinity",
        rule="app=web on topology key hostaffinity.io/esxi-host",
        result="evicted",
        owner="ReplicaSet/web-6d4",
    ),
    VmiMigrationRequested(
        **COMMON,
        vmi="kv/vm-a",
        migration="vm-a-desched-1",
        node="worker-1",
        strategy="RemovePodsViolatingNodeTaints",
        rule="taint dedicated=infra:NoSchedule",
        pod="kv/virt-launcher-vm-a-x",
    ),
    DrsRulesApplied(
        **COMMON, vcenter="vc", cluster_moid="domain-c7", added=["hostaffinity-anti-1"]
    ),
    DrsRuleConflict(
        **COMMON,
        vcenter="vc",
        cluster_moid="domain-c7",
        name="hostaffinity-anti-2",
        reason="too-few-hosts",
        message="4 VMs apart on 3 usable hosts",
        vms=["vm-1", "vm-2", "vm-3", "vm-4"],
        pods=["default/a"],
    ),
    DrsRuleDrift(
        **COMMON,
        vcenter="vc",
        cluster_moid="domain-c7",
        name="hostaffinity-anti-1",
        change="deleted",
        expected_vms=["vm-1", "vm-3"],
    ),
    DrsRuleHeld(
        **COMMON,
        vcenter="vc",
        cluster_moid="domain-c7",
        name="hostaffinity-anti-1",
        reason="host-maintenance",
        message="3 VMs apart, 2 hosts left while host-21 enters maintenance mode",
        hosts=["host-21"],
        vms=["vm-1", "vm-2", "vm-3"],
        pods=["default/a"],
    ),
    ExtenderDecision(
        **COMMON,
        verb="filter",
        pod="shop/web-1",
        pod_uid="u1",
        outcome="unschedulable",
        nodes_asked=3,
        rejections={"host anti-affinity": 3},
    ),
    PodMutated(**COMMON, pod="shop/web-", request_uid="r1", owner="ReplicaSet/web-6d4", twins=1),
]


def test_every_event_type_has_an_example() -> None:
    """EVENT_MESSAGES comes from the union; an event without an example would go untested."""
    assert {type(event) for event in EXAMPLES} == set(EVENT_MESSAGES)
    assert len(set(EVENT_TYPES)) == len(EVENT_MESSAGES)


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_with_its_type_tag(event: msgspec.Struct) -> None:
    data = encode_event(event)  # type: ignore[arg-type]
    assert json.loads(data)["type"] in EVENT_TYPES
    assert decode_event(data) == event


def test_unknown_fields_from_a_newer_writer_are_ignored() -> None:
    newer = json.loads(encode_event(EXAMPLES[0]))
    newer["added_in_a_later_version"] = {"nested": True}
    assert decode_event(json.dumps(newer).encode()) == EXAMPLES[0]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b'{"type": "vm.teleported", "id": "x"}', "Invalid value 'vm.teleported'"),
        (b'{"type": "vm.moved", "id": "x"}', "missing required field"),
        (b"not json", "malformed"),
        (b'{"id": "x"}', "Missing required field `type`"),
    ],
    ids=["unknown-type", "missing-fields", "not-json", "no-tag"],
)
def test_bad_messages_raise_a_clear_error(data: bytes, needle: str) -> None:
    with pytest.raises((msgspec.ValidationError, msgspec.DecodeError), match=f"(?i){needle}"):
        decode_event(data)


def test_event_ids_are_deterministic_and_distinct() -> None:
    first = event_id("vm.moved", "vm-42", 7)
    assert first == event_id("vm.moved", "vm-42", 7)
    assert first != event_id("vm.moved", "vm-42", 8)
    assert first != event_id("node.placed", "vm-42", 7)
    assert first.startswith("vm.moved-")


def test_subjects_follow_the_event_type() -> None:
    assert event_subject("vm.moved") == "hostaffinity.events.vm.moved"
