"""Ownership in the diff: only objects named for this install *and* recorded are ever edited or
removed; another install's are listed and never touched."""

from collections.abc import Mapping, Set
from dataclasses import replace

from hostaffinity.drs_translator.core.diff import ClusterDiff, diff_cluster
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.schema import DrsName, DrsOwnership, DrsRecordState, fleet_rule_name

C = "domain-c1"
INSTALL = "cluster-a"


def named(digest: str, install: str | None = INSTALL) -> str:
    return str(DrsName("vm-anti-affinity", install, digest * 12))


def diff(
    desired: Mapping[str, DrsObject],
    held: Set[str],
    records: Mapping[str, DrsOwnership],
    actual: Mapping[str, DrsObject],
) -> ClusterDiff:
    return diff_cluster(desired, held, records, actual, INSTALL)


def anti(name: str, *vms: str, key: int | None = None) -> DrsObject:
    return DrsObject(name, "vm-anti-affinity", C, vms=tuple(sorted(vms)), key=key)


def record(obj: DrsObject, state: DrsRecordState = "applied") -> DrsOwnership:
    return obj.record("vc", state=state, recorded_at="t")


OURS = anti(named("a"), "vm1", "vm3")
WIDER = anti(named("a"), "vm1", "vm3", "vm5")


def ops(found: object) -> list[tuple[str, str, int | None]]:
    return [(c.op, c.obj.name, c.obj.key) for c in found.changes]  # type: ignore[attr-defined]


def test_new_rule_is_added() -> None:
    found = diff({OURS.name: OURS}, set(), {}, {})
    assert ops(found) == [("add", OURS.name, None)]


def test_recorded_rule_is_edited_by_its_vcenter_key() -> None:
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    found = diff({WIDER.name: WIDER}, set(), {OURS.name: record(OURS)}, actual)
    assert ops(found) == [("edit", OURS.name, 7)]
    assert not found.drift


def test_recorded_rule_no_longer_desired_is_removed() -> None:
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    found = diff({}, set(), {OURS.name: record(OURS)}, actual)
    assert ops(found) == [("remove", OURS.name, 7)]


def test_rule_named_for_this_install_without_record_is_reported_never_touched() -> None:
    stray = anti(named("f"), "vm1", "vm2", key=3)
    same_name = anti(OURS.name, "vm2", "vm4", key=4)
    found = diff({OURS.name: OURS}, set(), {}, {stray.name: stray, OURS.name: same_name})
    assert ops(found) == []
    assert [o.name for o in found.unowned] == [OURS.name, stray.name]


def test_foreign_rules_are_not_looked_at() -> None:
    admin = anti("keep-db-apart", "vm1", "vm2", key=1)
    prefixed = anti("hostaffinity-made-by-hand", "vm1", "vm2", key=2)
    found = diff({}, set(), {}, {admin.name: admin, prefixed.name: prefixed})
    assert (ops(found), found.unowned, found.forget, found.other_installs) == ([], [], [], [])


def test_another_install_s_rules_are_listed_never_reported_or_touched() -> None:
    """Two clusters' installs on one vCenter: the same workload gives the same digest, the
    install in the name keeps them apart; a pre-0.2.0 name without our record is another
    install's too."""
    theirs = anti(named("a", "cluster-b"), "vm7", "vm8", key=5)
    old = anti(named("b", None), "vm7", "vm9", key=6)
    found = diff({OURS.name: OURS}, set(), {}, {theirs.name: theirs, old.name: old})
    assert ops(found) == [("add", OURS.name, None)]
    assert found.unowned == []
    assert sorted(o.name for o in found.other_installs) == sorted([theirs.name, old.name])


def test_applied_rule_deleted_by_hand_is_drift_and_added_again() -> None:
    found = diff({OURS.name: OURS}, set(), {OURS.name: record(OURS)}, {})
    assert ops(found) == [("add", OURS.name, None)]
    assert [(d.name, d.change) for d in found.drift] == [(OURS.name, "deleted")]


def test_applied_rule_edited_by_hand_is_drift_and_edited_back() -> None:
    edited = anti(OURS.name, "vm1", key=7)
    found = diff({OURS.name: OURS}, set(), {OURS.name: record(OURS)}, {OURS.name: edited})
    assert ops(found) == [("edit", OURS.name, 7)]
    assert [(d.name, d.change) for d in found.drift] == [(OURS.name, "edited")]


def test_pending_record_with_the_rule_present_is_only_confirmed() -> None:
    """The crash between reconfigure and record: the rule is there, one record, no twin."""
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    found = diff({OURS.name: OURS}, set(), {OURS.name: record(OURS, "pending")}, actual)
    assert ops(found) == []
    assert found.confirm == [OURS]
    assert not found.drift


def test_pending_record_without_rule_is_no_drift() -> None:
    found = diff({OURS.name: OURS}, set(), {OURS.name: record(OURS, "pending")}, {})
    assert ops(found) == [("add", OURS.name, None)]
    assert not found.drift


def test_record_of_a_vanished_undesired_rule_is_forgotten() -> None:
    found = diff({}, set(), {OURS.name: record(OURS, "removing")}, {})
    assert (ops(found), found.forget) == ([], [OURS.name])


def test_held_rule_is_neither_edited_nor_removed() -> None:
    actual = {OURS.name: anti(OURS.name, "vm1", "vm3", key=7)}
    found = diff({}, {OURS.name}, {OURS.name: record(OURS)}, actual)
    assert (ops(found), found.forget) == ([], [])


HELD = replace(OURS, enabled=False, held_because="held so that hosts h2 can enter maintenance")


def test_holding_a_rule_is_an_edit_to_disabled_and_the_held_record_is_no_drift() -> None:
    enforced = {OURS.name: replace(OURS, key=7)}
    found = diff({HELD.name: HELD}, set(), {OURS.name: record(OURS)}, enforced)
    assert ops(found) == [("edit", OURS.name, 7)]
    assert not found.changes[0].obj.enabled
    disabled = {OURS.name: replace(HELD, key=7)}
    settled = diff({HELD.name: HELD}, set(), {HELD.name: record(HELD)}, disabled)
    assert (ops(settled), settled.drift, settled.confirm) == ([], [], [])


def test_restoring_a_held_rule_is_an_edit_to_enabled() -> None:
    disabled = {OURS.name: replace(HELD, key=7)}
    found = diff({OURS.name: OURS}, set(), {HELD.name: record(HELD)}, disabled)
    assert ops(found) == [("edit", OURS.name, 7)]
    assert found.changes[0].obj.enabled
    assert not found.drift


def test_a_held_rule_enabled_by_hand_is_drift_and_disabled_again() -> None:
    enabled = {OURS.name: replace(OURS, key=7)}
    found = diff({HELD.name: HELD}, set(), {HELD.name: record(HELD)}, enabled)
    assert ops(found) == [("edit", OURS.name, 7)]
    assert [d.change for d in found.drift] == ["edited"]


FLEET = anti(fleet_rule_name(C, "payments-db"), "vm1", "vm9", key=11)


def test_a_fleet_rule_is_never_this_diff_s_to_change_even_with_our_record() -> None:
    """Its lease holder writes it (fleet_rules.py): a plan without it never removes it, and a
    plan can never add it."""
    found = diff({}, set(), {FLEET.name: record(FLEET)}, {FLEET.name: FLEET})
    assert ops(found) == []
    assert found.forget == []
    assert found.unowned == []
    assert found.other_installs == []


def test_a_fleet_rule_we_hold_no_record_of_is_listed_as_another_s_never_unowned() -> None:
    found = diff({}, set(), {}, {FLEET.name: FLEET})
    assert ops(found) == []
    assert found.unowned == []
    assert [o.name for o in found.other_installs] == [FLEET.name]
