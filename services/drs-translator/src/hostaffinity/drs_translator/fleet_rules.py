"""One vCenter's fleet rules, each cycle: planned (fleet_planner.py), then written by this install
only where it holds the rule's lease on the hub (fleet_leases.py), through the applier's batch,
records first, like every rule of ours (applier.py).

For each rule the plan names (keyed on the hub by vCenter UUID, cluster and rule name):

- This install holds the lease and has a member there, the rule planned: it adds the rule, or
  edits it by its key until vCenter holds it as planned. A rule first met without a record (just
  taken over) is read fresh and adopted: the record, then an edit only if the members changed.
  The rule is never removed to be added back.
- It holds the lease, no rule planned (under two VMs): it removes the rule, then lets go.
- It holds the lease but has no member there any more: it lets go and forgets its record,
  leaving the rule; an install with members takes it over.
- It holds the lease and the plan is a conflict (too few hosts): the rule stays as vCenter has
  it, and the conflict is reported once.
- It does not hold the lease: it never touches the rule and forgets a record it kept; it asks
  for the lease when it has a member there and the rule is planned or exists.

Another install's view is never needed to decide: every install plans the same rule from the same
fleet view, and the lease decides who writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import PodRecord
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.core.diff import Change
from hostaffinity.drs_translator.core.fleet_planner import FleetRulePlan, plan_fleet_rules
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.drs_translator.fleet_leases import FleetLeases, LeaseSubject
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.schema import (
    EsxiHost,
    NodePlacement,
    fleet_lease_key,
    parse_drs_name,
    utc_timestamp,
)

_log = logging.getLogger(__name__)


def _wants_lease(plan: FleetRulePlan, exists: bool, held: bool) -> bool:
    """An install with a member there wants the lease while the rule is planned or exists (to
    write it, or to remove it); its holder also keeps it until a rule no longer planned is
    gone. An install with no member there lets an install with members hold it."""
    if plan.own:
        return plan.rule is not None or exists
    return held and plan.rule is None and exists


class FleetRules:
    """The fleet rules of one vCenter (`vcenter`, as this install names it)."""

    def __init__(
        self,
        vcenter: str,
        leases: FleetLeases,
        fleet: FleetMembers,
        applier: DrsApplier,
        records: OwnershipRecords,
        rules: ClusterRules,
    ) -> None:
        self._vcenter = vcenter
        self._leases = leases
        self._fleet = fleet
        self._applier = applier
        self._records = records
        self._rules = rules
        self._reported: set[tuple[str, ...]] = set()
        self._said_no_uuid = False

    async def cycle(
        self,
        own: Iterable[PodRecord],
        placements: Mapping[str, NodePlacement],
        hosts: Mapping[str, EsxiHost],
    ) -> None:
        """Plan this vCenter's fleet rules and write those whose lease this install holds."""
        recorded = {
            cluster: [n for n in names if (parsed := parse_drs_name(n)) and parsed.fleet]
            for cluster, names in self._records.by_cluster.items()
        }
        plans = plan_fleet_rules(own, placements, hosts, self._fleet, self._vcenter, recorded)
        uuid = self._rules.instance_uuid()
        if not uuid:
            if plans and not self._said_no_uuid:
                _log.warning(
                    "vCenter %s gives no instance UUID: other installs could not tell it is the "
                    "same vCenter, so this install writes no fleet rule there",
                    self._vcenter,
                )
                self._said_no_uuid = True
            return
        wanted: dict[str, LeaseSubject] = {}
        reported: set[tuple[str, ...]] = set()
        for plan in plans:
            key = fleet_lease_key(uuid, plan.cluster_moid, plan.name)
            subject = LeaseSubject(uuid, plan.cluster_moid, plan.group, plan.name)
            if self._leases.holds(key):
                exists = await self._as_holder(plan, reported)
            else:
                await self._forget(plan)
                exists = plan.name in self._applier.actual(plan.cluster_moid)
            if _wants_lease(plan, exists, self._leases.holds(key)):
                wanted[key] = subject
        self._reported = reported
        self._leases.want(self._vcenter, wanted)

    async def _as_holder(self, plan: FleetRulePlan, reported: set[tuple[str, ...]]) -> bool:
        """Bring vCenter to the plan; whether the rule exists in vCenter afterwards."""
        cluster, name = plan.cluster_moid, plan.name
        record = self._records.of(cluster).get(name)
        actual = self._applier.actual(cluster)
        if record is None or name not in actual:
            actual = await self._applier.reread(cluster)  # taken over, or gone: as it is now
        have = actual.get(name)
        if plan.conflict is not None:
            conflict = plan.conflict
            key = ("conflict", cluster, name, conflict.reason, *conflict.vms)
            reported.add(key)
            if key not in self._reported:
                _log.warning("fleet rule %s held in %s: %s", name, cluster, conflict.message)
                self._applier.report_conflict(
                    cluster, name, conflict.reason, conflict.message,
                    vms=conflict.vms, pods=conflict.pods,
                )  # fmt: skip
            return have is not None
        if plan.rule is None:
            if have is not None:
                await self._applier.write(cluster, [Change("remove", have)])
            return name in self._applier.actual(cluster)
        if not plan.own:
            _log.info("fleet rule %s in %s: no member here any more, handed over", name, cluster)
            await self._forget(plan)
            return False
        await self._bring(cluster, plan.rule, have, record is None)
        return name in self._applier.actual(cluster)

    async def _bring(
        self, cluster: str, want: DrsObject, have: DrsObject | None, adopting: bool
    ) -> None:
        if have is None:
            await self._applier.write(cluster, [Change("add", want)])
            return
        if adopting:
            _log.info("fleet rule %s in %s: taken over as vCenter holds it", want.name, cluster)
        if not want.same_content(have):
            await self._applier.write(cluster, [Change("edit", replace(want, key=have.key))])
            return
        record = self._records.of(cluster).get(want.name)
        if record is None or record.state != "applied" or list(want.vms) != record.vms:
            now = utc_timestamp()
            await self._records.put(want.record(
                self._vcenter, state="applied", recorded_at=now, applied_at=now
            ))  # fmt: skip

    async def _forget(self, plan: FleetRulePlan) -> None:
        """A record of a rule this install does not hold the lease of: the rule is not ours to
        touch (vCenter is left as it is), so neither is the record."""
        if plan.name in self._records.of(plan.cluster_moid):
            await self._records.delete(plan.cluster_moid, plan.name)
