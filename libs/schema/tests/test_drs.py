"""The drs-translator's ownership record, its KV key and its three events."""

import json

import msgspec
import pytest

from hostaffinity.schema import (
    EVENT_TYPES,
    DrsOwnership,
    DrsRuleConflict,
    DrsRuleDrift,
    DrsRulesApplied,
    decode_event,
    drs_rule_key,
    encode_event,
)

COMMON = {"id": "e1", "occurred_at": "2026-11-22T08:00:00.000000Z", "source": "drs-translator"}
EVENTS = [
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
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_drs_events_round_trip_with_a_declared_type(event: msgspec.Struct) -> None:
    data = encode_event(event)  # type: ignore[arg-type]
    assert json.loads(data)["type"] in EVENT_TYPES
    assert decode_event(data) == event


def test_ownership_record_round_trips_and_defaults_to_pending() -> None:
    record = DrsOwnership(
        vcenter="vc", cluster_moid="domain-c7", name="hostaffinity-anti-1",
        kind="vm-anti-affinity", vms=["vm-1", "vm-3"], pods=["default/p1", "default/p2"],
    )  # fmt: skip
    assert record.state == "pending"
    assert msgspec.json.decode(msgspec.json.encode(record), type=DrsOwnership) == record


def test_an_unknown_kind_is_rejected() -> None:
    raw = b'{"vcenter":"vc","cluster_moid":"c","name":"n","kind":"vm-sometimes"}'
    with pytest.raises(msgspec.ValidationError, match="kind"):
        msgspec.json.decode(raw, type=DrsOwnership)


@pytest.mark.parametrize(
    ("vcenter", "expected"),
    [
        ("vc.example.com", "rule.vc.example.com.domain-c7.hostaffinity-anti-1"),
        ("127.0.0.1:8989", "rule.127.0.0.1-8989.domain-c7.hostaffinity-anti-1"),
        ("my vcenter", "rule.my-vcenter.domain-c7.hostaffinity-anti-1"),
    ],
)
def test_rule_key_keeps_only_characters_a_kv_key_may_hold(vcenter: str, expected: str) -> None:
    assert drs_rule_key(vcenter, "domain-c7", "hostaffinity-anti-1") == expected
