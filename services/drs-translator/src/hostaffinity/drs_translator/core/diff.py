"""Desired (the plan), recorded (our KV records) and actual (vCenter) → the changes for a cluster.

Pure. The ownership rule lives here: a name of this install (naming.name_owner) is ours only when
a record says so. Ours and desired: added or edited until vCenter matches. Ours and no longer
desired: removed. Named for this install without a record: reported, never touched. Another
install's (its name says so, a legacy name without our record included): listed, never touched,
never a conflict. A fleet group's rule is never this diff's, record or not: its lease holder
writes it (fleet_rules.py); one this install holds no record of is listed with the other
installs'. Anything else: not looked at. A record in state `applied` whose object vCenter no
longer holds as recorded is drift (changed by hand).
"""

from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace
from typing import Literal

from hostaffinity.drs_translator.core.naming import name_owner
from hostaffinity.drs_translator.core.rules import DrsObject, from_record
from hostaffinity.schema import DrsOwnership

Operation = Literal["add", "edit", "remove"]


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of a reconfigure: `obj` is what to write (add, edit) or what to remove."""

    op: Operation
    obj: DrsObject


# How a rule of ours was changed outside hostaffinity.
DriftChange = Literal["deleted", "edited"]


@dataclass(frozen=True, slots=True)
class Drift:
    name: str
    change: DriftChange
    expected: DrsObject
    found: DrsObject | None


@dataclass(slots=True)
class ClusterDiff:
    changes: list[Change] = field(default_factory=list)
    # Desired and already in vCenter as wanted: only the record needs writing (state, pods).
    confirm: list[DrsObject] = field(default_factory=list)
    # Records of objects that are neither desired nor in vCenter any more.
    forget: list[str] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    unowned: list[DrsObject] = field(default_factory=list)
    # Other installs' rules and groups in the cluster (they share its hosts).
    other_installs: list[DrsObject] = field(default_factory=list)


def diff_cluster(
    desired: Mapping[str, DrsObject],
    held: Set[str],
    records: Mapping[str, DrsOwnership],
    actual: Mapping[str, DrsObject],
    install: str,
) -> ClusterDiff:
    """The changes that bring vCenter to `desired` without touching what is not ours.

    `held` names are in conflict: whatever vCenter and the record hold for them stays.
    `install` is this install's token, which its names carry.
    """
    result = ClusterDiff()
    with_record = set(records)
    records = {n: r for n, r in records.items() if name_owner(n, install) != "fleet"}
    for name, present in sorted(actual.items()):
        if name in with_record:
            continue
        owner = name_owner(name, install)
        if owner == "ours":
            result.unowned.append(present)
        elif owner in ("legacy", "other-install", "fleet"):
            result.other_installs.append(present)
    for name, want in sorted(desired.items()):
        have, record = actual.get(name), records.get(name)
        if record is None:
            if have is None:
                result.changes.append(Change("add", want))
            continue  # present without a record: not ours, reported above
        recorded = from_record(record)
        if have is None:
            if record.state == "applied":
                result.drift.append(Drift(name, "deleted", recorded, None))
            result.changes.append(Change("add", want))
            continue
        if record.state == "applied" and not recorded.same_content(have):
            result.drift.append(Drift(name, "edited", recorded, have))
        if not want.same_content(have):
            result.changes.append(Change("edit", _with_key(want, have)))
        elif (
            record.state != "applied"
            or recorded != want
            or list(want.pods) != record.pods
            or want.held_because != record.held_because
        ):
            result.confirm.append(want)
    for name in sorted(records):
        if name in desired or name in held:
            continue
        left = actual.get(name)
        if left is None:
            result.forget.append(name)
        else:
            result.changes.append(Change("remove", left))
    return result


def _with_key(want: DrsObject, have: DrsObject) -> DrsObject:
    """The desired object carrying vCenter's rule key, which an edit is addressed by."""
    return replace(want, key=have.key)
