"""Events built in one place: tag and id from the class, source from the service."""

import pytest

from hostaffinity.schema import (
    DrsRuleConflict,
    DrsRuleHeld,
    DrsRulesApplied,
    EventFactory,
    NodeLabelled,
    PodEvicted,
    PodMutated,
    decode_event,
    encode_event,
    event_id,
    id_of,
)

WHEN = "2026-11-22T08:00:00.000000Z"
EVENTS = EventFactory("descheduler")

# Ids as releases up to 0.2 computed them by hand (`event_id("<tag>", ...)`), pinned: JetStream's
# dedup across an upgrade, and the successor finishing a predecessor's intent, rely on them.
PINNED = [
    (
        NodeLabelled,
        ("worker-1", 7, [("a", "1"), ("b", "2")]),
        "node.labelled-877f63363b9b77876aa2a3c7",
    ),
    (
        DrsRulesApplied,
        ("vc", "domain-c7", WHEN, {"add": ["r1"], "edit": [], "remove": []}),
        "drs.rules.applied-6beaedf855e097314b68f1da",
    ),
    (PodEvicted, ("uid-1", "requested", WHEN), "pod.evicted-88c5396dcc789ff783c899fa"),
    (
        DrsRuleHeld,
        ("vc", "domain-c7", "rule", True, WHEN),
        "drs.rule.held-e6fc4275662341be70e5cff9",
    ),
    (PodMutated, ("req-1",), "pod.mutated-8fc84c7d3be22e7248882efa"),
]


@pytest.mark.parametrize(("message", "parts", "pinned"), PINNED)
def test_ids_are_those_earlier_releases_computed(
    message: type[PodEvicted], parts: tuple[object, ...], pinned: str
) -> None:
    assert id_of(message, *parts) == pinned


def test_the_factory_stamps_tag_id_source_and_time() -> None:
    event = EVENTS.new(
        PodMutated, "req-1", occurred_at=WHEN, pod="default/web-", request_uid="req-1"
    )
    assert event.id == "pod.mutated-8fc84c7d3be22e7248882efa"
    assert (event.source, event.occurred_at) == ("descheduler", WHEN)
    assert decode_event(encode_event(event)) == event
    assert b'"type":"pod.mutated"' in encode_event(event)


def test_the_time_is_now_unless_given() -> None:
    event = EVENTS.new(PodMutated, "req-2", pod="default/web-", request_uid="req-2")
    assert event.occurred_at > WHEN
    assert event.occurred_at.endswith("Z")


def test_a_field_the_event_does_not_have_is_refused() -> None:
    with pytest.raises(TypeError, match="podd"):
        EVENTS.new(PodMutated, "req-3", podd="x", request_uid="req-3")


def test_a_field_may_share_a_name_with_the_factorys_parameters() -> None:
    event = EVENTS.new(
        DrsRuleConflict, "vc", "c1", "r", "refused", vcenter="vc", cluster_moid="c1", name="r",
        reason="refused", message="vCenter refused the add",
    )  # fmt: skip
    assert event.message == "vCenter refused the add"
    assert event.id == event_id("drs.rule.conflict", "vc", "c1", "r", "refused")
