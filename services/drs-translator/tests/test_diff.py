"""Ownership in the diff: only prefixed *and* recorded objects are ever edited or removed."""

from dataclasses import replace

from hostaffinity.drs_translator.diff import diff_cluster
from hostaffinity.drs_translator.rules import DrsObject
from hostaffinity.schema import DrsOwnership, DrsRecordState

C = "domain-c1"


def anti(name: str, *vms: str, key: int | None = None) -> DrsObject:
    return DrsObject(name, "vm-anti-affinity", C, vms=tuple(sorted(vms)), key=key)


def record(obj: DrsObject, state: DrsRecordState = "applied") -> DrsOwnership:
    return obj.record("vc", state=state, recorded_at="t")


OURS = anti("hostaffinity-anti-a", "vm1", "vm3")
WIDER = anti("hostaffinity-anti-a", "vm1", "vm3", "vm5")


def ops(diff: object) -> list[tuple[str, str, int | None]]:
    return [(c.op, c.obj.name, c.obj.key) for c in diff.changes]  # type: ignore[attr-defined]


def test_new_rule_is_added() -> None:
    diff = diff_cluster({OURS.name: OURS}, set(), {}, {})
    assert ops(diff) == [("add", OURS.name, None)]


def test_recorded_rule_is_edited_by_its_vcenter_key() -> None:
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    diff = diff_cluster({WIDER.name: WIDER}, set(), {OURS.name: record(OURS)}, actual)
    assert ops(diff) == [("edit", OURS.name, 7)]
    assert not diff.drift


def test_recorded_rule_no_longer_desired_is_removed() -> None:
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    diff = diff_cluster({}, set(), {OURS.name: record(OURS)}, actual)
    assert ops(diff) == [("remove", OURS.name, 7)]


def test_prefixed_rule_without_record_is_reported_never_touched() -> None:
    stray = anti("hostaffinity-anti-stray", "vm1", "vm2", key=3)
    same_name = anti(OURS.name, "vm2", "vm4", key=4)
    diff = diff_cluster({OURS.name: OURS}, set(), {}, {stray.name: stray, OURS.name: same_name})
    assert ops(diff) == []
    assert [o.name for o in diff.unowned] == [OURS.name, stray.name]


def test_foreign_rules_are_not_looked_at() -> None:
    admin = anti("keep-db-apart", "vm1", "vm2", key=1)
    diff = diff_cluster({}, set(), {}, {admin.name: admin})
    assert (ops(diff), diff.unowned, diff.forget) == ([], [], [])


def test_applied_rule_deleted_by_hand_is_drift_and_added_again() -> None:
    diff = diff_cluster({OURS.name: OURS}, set(), {OURS.name: record(OURS)}, {})
    assert ops(diff) == [("add", OURS.name, None)]
    assert [(d.name, d.change) for d in diff.drift] == [(OURS.name, "deleted")]


def test_applied_rule_edited_by_hand_is_drift_and_edited_back() -> None:
    edited = anti(OURS.name, "vm1", key=7)
    diff = diff_cluster({OURS.name: OURS}, set(), {OURS.name: record(OURS)}, {OURS.name: edited})
    assert ops(diff) == [("edit", OURS.name, 7)]
    assert [(d.name, d.change) for d in diff.drift] == [(OURS.name, "edited")]


def test_pending_record_with_the_rule_present_is_only_confirmed() -> None:
    """The crash between reconfigure and record: the rule is there, one record, no twin."""
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    diff = diff_cluster({OURS.name: OURS}, set(), {OURS.name: record(OURS, "pending")}, actual)
    assert ops(diff) == []
    assert diff.confirm == [OURS]
    assert not diff.drift


def test_pending_record_without_rule_is_no_drift() -> None:
    diff = diff_cluster({OURS.name: OURS}, set(), {OURS.name: record(OURS, "pending")}, {})
    assert ops(diff) == [("add", OURS.name, None)]
    assert not diff.drift


def test_record_of_a_vanished_undesired_rule_is_forgotten() -> None:
    diff = diff_cluster({}, set(), {OURS.name: record(OURS, "removing")}, {})
    assert (ops(diff), diff.forget) == ([], [OURS.name])


def test_held_rule_is_neither_edited_nor_removed() -> None:
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    diff = diff_cluster({}, {OURS.name}, {OURS.name: record(OURS)}, actual)
    assert (ops(diff), diff.forget) == ([], [])


HELD = replace(OURS, enabled=False, held_because="held so that hosts h2 can enter maintenance")


def test_holding_a_rule_is_an_edit_to_disabled_and_the_held_record_is_no_drift() -> None:
    enforced = {OURS.name: replace(OURS, key=7)}
    diff = diff_cluster({HELD.name: HELD}, set(), {OURS.name: record(OURS)}, enforced)
    assert ops(diff) == [("edit", OURS.name, 7)]
    assert not diff.changes[0].obj.enabled
    disabled = {OURS.name: replace(HELD, key=7)}
    settled = diff_cluster({HELD.name: HELD}, set(), {HELD.name: record(HELD)}, disabled)
    assert (ops(settled), settled.drift, settled.confirm) == ([], [], [])


def test_restoring_a_held_rule_is_an_edit_to_enabled() -> None:
    disabled = {OURS.name: replace(HELD, key=7)}
    diff = diff_cluster({OURS.name: OURS}, set(), {HELD.name: record(HELD)}, disabled)
    assert ops(diff) == [("edit", OURS.name, 7)]
    assert diff.changes[0].obj.enabled
    assert not diff.drift


def test_a_held_rule_enabled_by_hand_is_drift_and_disabled_again() -> None:
    enabled = {OURS.name: replace(OURS, key=7)}
    diff = diff_cluster({HELD.name: HELD}, set(), {HELD.name: record(HELD)}, enabled)
    assert ops(diff) == [("edit", OURS.name, 7)]
    assert [d.change for d in diff.drift] == ["edited"]
