"""The drs-translator's ownership record and its KV key (its events: test_events.py)."""

import msgspec
import pytest

from hostaffinity.schema import (
    DrsOwnership,
    drs_rule_key,
)


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
