"""`hostaffinity uninstall` leaves a fleet group's rule in vCenter, even one this install held
the lease and a record of: another install with members takes it over without a gap."""

from __future__ import annotations

from dataclasses import dataclass

from hostaffinity.cli.uninstall import ours_in_cluster
from hostaffinity.schema import DrsName, DrsOwnership, fleet_rule_name

CLUSTER = "domain-c7"
FLEET = fleet_rule_name(CLUSTER, "payments-db")
OURS = str(DrsName("vm-anti-affinity", "cluster-a", "a" * 12))


@dataclass
class Rule:
    """What pyVmomi gives of a rule in `configurationEx.rule`: its name and key."""

    name: str
    key: int


def record(name: str) -> DrsOwnership:
    return DrsOwnership(
        vcenter="vc", cluster_moid=CLUSTER, name=name, kind="vm-anti-affinity", state="applied"
    )


def test_the_fleet_rule_stays_and_is_said_to_whoever_held_it() -> None:
    held = ours_in_cluster(
        {OURS: record(OURS), FLEET: record(FLEET)}, [Rule(OURS, 1), Rule(FLEET, 2)], []
    )
    assert held.rules == {OURS: 1}
    assert len(held.left) == 1
    assert "a fleet group's rule, left for the install that takes its lease next" in held.left[0]
    not_held = ours_in_cluster({OURS: record(OURS)}, [Rule(OURS, 1), Rule(FLEET, 2)], [])
    assert not_held.rules == {OURS: 1}
    assert not_held.left == []  # another holder's: not ours to mention
