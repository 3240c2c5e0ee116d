"""What needs attention in a cluster (attention.py): the groups vCenter does not hold, with why,
and the rules of other installs on the same hosts."""

import pytest

from hostaffinity.drs_translator.core.attention import other_install_rules, unprotected_groups
from hostaffinity.drs_translator.core.plan import ClusterPlan, Conflict
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.schema import DrsName, DrsObjectKind
from tests.platform.builders.drs import INSTALL

C = "domain-c1"


def name(kind: DrsObjectKind, digest: str, install: str | None = INSTALL) -> str:
    return str(DrsName(kind, install, digest * 12))


def anti(rule: str, *vms: str, enabled: bool = True) -> DrsObject:
    return DrsObject(rule, "vm-anti-affinity", C, vms=vms, enabled=enabled, pods=("ns/p",))


WANTED = anti(name("vm-anti-affinity", "a"), "vm1", "vm2")


def plan(*objects: DrsObject) -> ClusterPlan:
    return ClusterPlan(C, {o.name: o for o in objects})


def test_a_group_vcenter_holds_needs_no_attention() -> None:
    assert unprotected_groups(plan(WANTED), [], {WANTED.name: WANTED}, {}, []) == []


@pytest.mark.parametrize(
    ("refused", "unowned", "reason"),
    [
        ({}, [], "not-yet"),
        ({WANTED.name: "InvalidArgument"}, [], "refused"),
        ({}, [WANTED.name], "prefix-without-record"),
    ],
    ids=["not-applied-yet", "refused-by-vcenter", "held-by-someone-without-our-record"],
)
def test_a_group_vcenter_does_not_hold_as_ours_says_why(
    refused: dict[str, str], unowned: list[str], reason: str
) -> None:
    actual = {WANTED.name: WANTED} if unowned else {}
    (group,) = unprotected_groups(plan(WANTED), [], actual, refused, unowned)
    assert (group.name, group.reason, group.vms, group.pods) == (
        WANTED.name,
        reason,
        ["vm1", "vm2"],
        ["ns/p"],
    )


def test_a_conflict_held_back_is_unprotected_with_the_conflict_s_reason() -> None:
    held = Conflict(C, WANTED.name, "too-few-hosts", "4 VMs, 3 hosts", ("vm1",), ("ns/p",))
    elsewhere = Conflict("domain-c9", "x", "refused", "", (), ())
    (group,) = unprotected_groups(plan(), [held, elsewhere], {}, {}, [])
    assert (group.reason, group.message) == ("too-few-hosts", "4 VMs, 3 hosts")


def test_other_installs_rules_are_listed_with_their_install_groups_left_out() -> None:
    theirs = anti(name("vm-anti-affinity", "b", "cluster-b"), "vm7", "vm8", enabled=False)
    old = anti(name("vm-anti-affinity", "c", None), "vm9")
    group = DrsObject(name("vm-group", "d", "cluster-b"), "vm-group", C, vms=("vm7",))
    listed = other_install_rules([group, theirs, old])
    assert [(r.name, r.install, r.enabled) for r in listed] == [
        (old.name, "", True),
        (theirs.name, "cluster-b", False),
    ]
