"""Brings one cluster's DRS rules and groups to the plan, one reconfigure per batch, crash-safe.

Order for a batch: ownership records first (`pending`, or `removing`), then one
`ReconfigureComputeResource_Task` with every add, edit and remove, then the `drs.rules.applied`
event kept in the bucket (announcements.py), then the records confirmed (`applied`, or deleted),
then the event sent. A translator killed between the reconfigure and the confirmation finds, on
restart, a record for the rule it wrote: the rule is ours, it is compared and at most edited,
never added twice, never orphaned; and the batch is announced exactly once: by the kept event
when the crash came after keeping it (`settle` confirms what it names), else by the restart, which
announces the `pending` records it finds applied and the `removing` ones it finds gone.

If vCenter refuses the batch, the cluster is read again (a simulator may have applied part of it)
and what is still to do is sent one change per call: the ones vCenter takes are applied, a refused
one is reported (`drs.rule.conflict`, reason `refused`) and retried with exponential backoff.

A rule the plan holds for a host's maintenance is edited to disabled, and enabled again when the
plan no longer holds it; once vCenter took either, `drs.rule.held` says so (`restored` on the way
back), telling held from restored by the record from before the batch.

Objects an earlier release named without the install's identity (`hostaffinity-<kind>-<digest>`)
are renamed in place on the first cycle after the upgrade (`rename_legacy`), in three batches that
each go through the same record-first order: the new groups added, each rule edited to its new
name and groups (vCenter addresses a rule by its key, so the rule is never absent), the old groups
removed. A rename cut short by a crash is finished by the next run from the records and vCenter.

Bus events go to the runtime's outbox: one made while NATS is away is published once it is back.
"""

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import msgspec

from hostaffinity.affinity.shared_hosts import shared_hosts_warnings
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.apply_steps import DRS_APPLY_PATH
from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.drs_translator.core.attention import other_install_rules
from hostaffinity.drs_translator.core.diff import Change, ClusterDiff, diff_cluster
from hostaffinity.drs_translator.core.plan import ClusterPlan
from hostaffinity.drs_translator.core.rules import ConflictReason, DrsObject, from_record
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules, ReconfigureRefused
from hostaffinity.schema import (
    DrsOwnership,
    DrsRecordState,
    DrsRuleConflict,
    DrsRuleDrift,
    DrsRuleHeld,
    DrsRulesApplied,
    EsxiHost,
    Event,
    EventFactory,
    SharedHostsWarning,
    parse_drs_name,
    utc_timestamp,
)

_log = logging.getLogger(__name__)
# Where a caller names none (tests), the config's own defaults.
_DEFAULTS = DrsSettings()
# Hands a bus event to the runtime's outbox, which keeps it until NATS takes it.
Send = Callable[[Event], None]
GROUP_KINDS: Final = frozenset({"vm-group", "host-group"})
BLOCKS: Final = "blocks-maintenance"


class RenameUnfinished(Exception):
    """vCenter refused part of a rename; the cycle is tried again (nothing else is changed in
    that cluster until the rename is done, so no rule is ever removed and added back)."""


@dataclass(slots=True)
class _Backoff:
    attempts: int
    not_before: float
    reason: str = ""


class DrsApplier:
    """Applies cluster plans for one vCenter; keeps vCenter's view of each cluster between runs."""

    def __init__(
        self,
        config: ClusterRules,
        records: OwnershipRecords,
        kept: KeptAnnouncements,
        send: Send,
        metrics: DrsMetrics,
        *,
        vcenter: str,
        install: str,
        event_factory: EventFactory,
        dry_run: bool = False,
        retry_base_seconds: float = _DEFAULTS.retry_base_seconds,
        retry_max_seconds: float = _DEFAULTS.retry_max_seconds,
        refresh_seconds: float = _DEFAULTS.shared_rules_refresh_seconds,
    ) -> None:
        self._config = config
        self._records = records
        self._kept = kept
        self._send = send
        self._metrics = metrics
        self._vcenter = vcenter
        self._install = install
        self._event_factory = event_factory
        self._dry_run = dry_run
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._refresh = refresh_seconds
        self._read_at: dict[str, float] = {}
        self._actual: dict[str, dict[str, DrsObject]] = {}
        self._reported: set[tuple[str, str]] = set()
        self._backoff: dict[tuple[str, str], _Backoff] = {}
        # Per cluster, from its last plan: held rule → the hosts in or entering maintenance.
        self._maintenance_holds: dict[str, Mapping[str, tuple[str, ...]]] = {}
        # Per cluster, from its last diff: other installs' rules and groups there, names of
        # ours vCenter holds without our record, and what other installs' rules do to the
        # cluster's hosts (`shared_hosts_warnings`, the hosts as the last `apply` was given).
        self.other_installs: dict[str, list[DrsObject]] = {}
        self.unowned: dict[str, list[str]] = {}
        self.shared_hosts: dict[str, list[SharedHostsWarning]] = {}

    def actual(self, cluster: str) -> Mapping[str, DrsObject]:
        """What vCenter holds in the cluster, as last read and changed by us since."""
        return self._actual.get(cluster, {})

    async def reread(self, cluster: str) -> Mapping[str, DrsObject]:
        """What vCenter holds in the cluster now (read again)."""
        await self._read(cluster)
        return self._actual[cluster]

    async def write(self, cluster: str, changes: Sequence[Change]) -> None:
        """Send `changes` as one batch, in the record-first order every batch keeps (a refused
        batch sent one change at a time); for rules planned elsewhere (fleet_rules.py)."""
        if not self._dry_run:
            await self._batch(cluster, self._due(cluster, changes))
        elif changes:
            self._send(self._applied_event(cluster, _names(changes)))

    def refused(self, cluster: str) -> dict[str, str]:
        """Name → vCenter's last refusal, for the cluster's changes waiting out a backoff."""
        return {name: b.reason for (c, name), b in self._backoff.items() if c == cluster}

    def next_retry(self) -> float | None:
        """When the earliest refused change may be tried again (monotonic), if any."""
        return min((b.not_before for b in self._backoff.values()), default=None)

    async def apply(
        self, plan: ClusterPlan, *, reread: bool = False, hosts: Sequence[EsxiHost] = ()
    ) -> None:
        """Make vCenter hold `plan` for its cluster; `reread` reads vCenter first (resync), as
        does a change of the rules held for maintenance (other installs' rules on the same hosts
        are judged on what vCenter holds now). `hosts` are the cluster's."""
        cluster = plan.cluster_moid
        holds_changed = plan.maintenance_holds != self._maintenance_holds.get(cluster, {})
        self._maintenance_holds[cluster] = plan.maintenance_holds
        stale = time.monotonic() >= self._read_at.get(cluster, 0.0) + self._refresh
        if reread or holds_changed or stale or cluster not in self._actual:
            await self._read(cluster)
        diff = self._diff(plan)
        if any(c.op != "add" and c.obj.is_rule and c.obj.key is None for c in diff.changes):
            await self._read(cluster)  # a rule we added: vCenter's key is learnt by reading
            diff = self._diff(plan)
        self._report(cluster, diff)
        self.other_installs[cluster] = diff.other_installs
        self.unowned[cluster] = [obj.name for obj in diff.unowned]
        self.shared_hosts[cluster] = shared_hosts_warnings(
            other_install_rules(diff.other_installs), hosts
        )
        changes = self._due(cluster, diff.changes)
        if self._dry_run:
            if changes:
                self._send(self._applied_event(cluster, _names(changes)))
            return
        await self._announce_recovered(cluster, diff)
        await self._batch(cluster, changes)
        for obj in diff.confirm:
            await self._records.put(
                obj.record(
                    self._vcenter,
                    state="applied",
                    recorded_at=utc_timestamp(),
                    applied_at=utc_timestamp(),
                )
            )
            DRS_APPLY_PATH.checkpoint("record-confirmed")
        for name in diff.forget:
            await self._records.delete(cluster, name)
            DRS_APPLY_PATH.checkpoint("record-confirmed")

    async def _batch(
        self, cluster: str, changes: Sequence[Change], renamed: Mapping[str, str] | None = None
    ) -> None:
        """One reconfigure for `changes`, record-first; a refused batch is sent one by one."""
        if not changes:
            return
        DRS_APPLY_PATH.checkpoint("planned")
        previous = await self._record_intent(changes)
        try:
            await self._config.reconfigure(cluster, changes)
        except ReconfigureRefused as refusal:
            self._metrics.reconfigures.add(1, {"outcome": "refused"})
            _log.warning("vCenter refused the batch for %s (%s); isolating", cluster, refusal)
            await self._isolate(cluster, changes, previous, renamed or {})
        else:
            self._metrics.reconfigures.add(1, {"outcome": "applied"})
            DRS_APPLY_PATH.checkpoint("reconfigured")
            await self._done(cluster, changes, previous, renamed or {})

    def _diff(self, plan: ClusterPlan) -> ClusterDiff:
        cluster = plan.cluster_moid
        return diff_cluster(
            plan.objects,
            plan.held,
            self._records.of(cluster),
            self._actual.get(cluster, {}),
            self._install,
        )

    # -- the upgrade's rename -------------------------------------------------------------

    def legacy_clusters(self) -> list[str]:
        """The clusters holding records of ours under names without the install (pre-0.2.0)."""
        return sorted(
            cluster
            for cluster, names in self._records.by_cluster.items()
            if any(_legacy(name) for name in names)
        )

    async def rename_legacy(self, cluster: str) -> None:
        """Give every legacy-named object of ours in the cluster its name with the install,
        in place: new groups, then each rule edited by its key, then the old groups removed.
        Raises `RenameUnfinished` when vCenter refused a step (the next cycle goes on)."""
        legacy = {n: r for n, r in self._records.of(cluster).items() if _legacy(n)}
        if not legacy or self._dry_run:
            return
        await self._read(cluster)
        actual = self._actual[cluster]
        new_name = {old: self._named_for_us(old) for old in legacy}
        groups = {old: r for old, r in legacy.items() if r.kind in GROUP_KINDS}
        rules = {old: r for old, r in legacy.items() if r.kind not in GROUP_KINDS}
        await self._batch(
            cluster,
            [
                Change("add", _renamed(record, new_name))
                for old, record in groups.items()
                if old in actual and new_name[old] not in actual
            ],
            new_name,
        )
        await self._batch(
            cluster,
            [
                Change("edit", replace(_renamed(record, new_name), key=actual[old].key))
                for old, record in rules.items()
                if old in actual and new_name[old] not in actual
            ],
            new_name,
        )
        await self._batch(
            cluster,
            [Change("remove", actual[old]) for old in groups if old in actual],
            new_name,
        )
        await self._read(cluster)
        for old, record in legacy.items():
            await self._settle_rename(cluster, old, record, new_name)

    async def _settle_rename(
        self, cluster: str, old: str, record: DrsOwnership, new_name: Mapping[str, str]
    ) -> None:
        """The records once vCenter holds the new name and not the old one: the new name's
        record (written by the batch, or here when vCenter had lost the object, which the next
        diff then reports as drift and adds back), and no record of the old name."""
        actual = self._actual[cluster]
        if old in actual:
            raise RenameUnfinished(f"{old} in {cluster} still has its old name in vCenter")
        new = new_name[old]
        if new not in self._records.of(cluster):
            renamed = _renamed(record, new_name)
            await self._records.put(
                renamed.record(
                    self._vcenter,
                    state=record.state if new in actual else "applied",
                    recorded_at=utc_timestamp(),
                    applied_at=record.applied_at,
                )
            )
        await self._records.delete(cluster, old)
        _log.info("%s in %s is now %s", old, cluster, new)

    def _named_for_us(self, legacy: str) -> str:
        parsed = parse_drs_name(legacy)
        assert parsed is not None  # `_legacy` parsed it
        return str(parsed.of_install(self._install))

    async def _read(self, cluster: str) -> None:
        self._actual[cluster] = await self._config.read(cluster)
        self._read_at[cluster] = time.monotonic()

    def next_read(self) -> float | None:
        """When the cluster read longest ago is due again (monotonic), if any was read."""
        if not self._read_at:
            return None
        return min(self._read_at.values()) + self._refresh

    def visit_only(self, clusters: Iterable[str]) -> None:
        """Forget what was read of clusters a cycle no longer visits (nothing of ours there)."""
        for cluster in set(self._read_at) - set(clusters):
            del self._read_at[cluster]
            self._actual.pop(cluster, None)

    def _due(self, cluster: str, changes: Sequence[Change]) -> list[Change]:
        now = time.monotonic()
        due = []
        for change in changes:
            backoff = self._backoff.get((cluster, change.obj.name))
            if backoff is None or backoff.not_before <= now:
                due.append(change)
        return due

    async def _record_intent(self, changes: Sequence[Change]) -> dict[str, DrsOwnership | None]:
        """Write `pending`/`removing` records; returns each name's record from before."""
        previous: dict[str, DrsOwnership | None] = {}
        for change in changes:
            obj = change.obj
            existing = previous[obj.name] = self._records.of(obj.cluster_moid).get(obj.name)
            if change.op == "remove":
                if existing is not None:
                    await self._records.put(_with_state(existing, "removing"))
            else:
                await self._records.put(
                    obj.record(self._vcenter, state="pending", recorded_at=utc_timestamp())
                )
            DRS_APPLY_PATH.checkpoint("intent-recorded")
        return previous

    async def settle(self, kept: DrsRulesApplied) -> None:
        """A kept event from before a restart: what it announces was applied, so its records
        are confirmed (a `pending` one becomes `applied`, a `removing` one goes)."""
        records = self._records.of(kept.cluster_moid)
        for name in [*kept.added, *kept.edited]:
            record = records.get(name)
            if record is not None and record.state == "pending":
                applied = msgspec.structs.replace(
                    record, state="applied", applied_at=kept.occurred_at
                )
                await self._records.put(applied)
        for name in kept.removed:
            record = records.get(name)
            if record is not None and record.state == "removing":
                await self._records.delete(kept.cluster_moid, name)

    async def _announce_recovered(self, cluster: str, diff: ClusterDiff) -> None:
        """What an earlier run wrote and did not announce (killed between the reconfigure and
        keeping the event): `pending` records vCenter holds, `removing` ones it no longer does."""
        records = self._records.of(cluster)
        added = [obj.name for obj in diff.confirm if _state(records, obj.name) == "pending"]
        removed = [name for name in diff.forget if _state(records, name) == "removing"]
        if added or removed:
            event = self._applied_event(cluster, {"add": added, "edit": [], "remove": removed})
            await self._kept.keep(event)
            DRS_APPLY_PATH.checkpoint("announcement-kept")
            self._send(event)
            DRS_APPLY_PATH.checkpoint("event-queued")

    async def _done(
        self,
        cluster: str,
        changes: Sequence[Change],
        previous: Mapping[str, DrsOwnership | None],
        renamed: Mapping[str, str],
    ) -> None:
        actual = self._actual.setdefault(cluster, {})
        applied_at = utc_timestamp()
        event = self._applied_event(cluster, _names(changes), _renames_in(changes, renamed))
        await self._kept.keep(event)
        DRS_APPLY_PATH.checkpoint("announcement-kept")
        for change in changes:
            obj = change.obj
            self._backoff.pop((cluster, obj.name), None)
            if change.op == "remove":
                actual.pop(obj.name, None)
                await self._records.delete(cluster, obj.name)
            else:
                actual[obj.name] = obj
                await self._records.put(
                    obj.record(
                        self._vcenter,
                        state="applied",
                        recorded_at=applied_at,
                        applied_at=applied_at,
                    )
                )
            DRS_APPLY_PATH.checkpoint("record-confirmed")
        self._send(event)
        DRS_APPLY_PATH.checkpoint("event-queued")
        for change in changes:
            if change.op != "remove" and change.obj.is_rule:
                self._announce_hold(cluster, change.obj, previous.get(change.obj.name))

    async def _isolate(
        self,
        cluster: str,
        changes: Sequence[Change],
        previous: Mapping[str, DrsOwnership | None],
        renamed: Mapping[str, str],
    ) -> None:
        """After a refused batch: keep what took effect, send the rest one change per call."""
        await self._read(cluster)
        actual = self._actual[cluster]
        for change in changes:
            name = change.obj.name
            if _took_effect(change, actual):
                await self._done(cluster, [change], previous, renamed)
                continue
            alone = change
            if change.op != "add" and name in actual:  # address vCenter's current rule key
                alone = Change(change.op, replace(change.obj, key=actual[name].key))
            try:
                await self._config.reconfigure(cluster, [alone])
            except ReconfigureRefused as refusal:
                self._metrics.reconfigures.add(1, {"outcome": "refused"})
                await self._restore(cluster, name, previous.get(name))
                DRS_APPLY_PATH.checkpoint("intent-recorded")
                self._refused(cluster, change, str(refusal))
            else:
                self._metrics.reconfigures.add(1, {"outcome": "applied"})
                DRS_APPLY_PATH.checkpoint("reconfigured")
                await self._done(cluster, [alone], previous, renamed)

    def _announce_hold(self, cluster: str, rule: DrsObject, before: DrsOwnership | None) -> None:
        """`drs.rule.held` when vCenter took a rule's hold, or its restoration."""
        was_held = before is not None and bool(before.held_because)
        if bool(rule.held_because) == was_held:
            return
        hosts = self._maintenance_holds.get(cluster, {}).get(rule.name, ())
        restored = not rule.held_because
        message = rule.held_because or (
            "restored: the hosts have room for its VMs again"
            + (f" (was {before.held_because})" if before is not None else "")
        )
        blocking = [w.message for w in self.shared_hosts.get(cluster, ()) if w.risk == BLOCKS]
        if rule.held_because and blocking:
            message += "; other installs' rules on these hosts: " + "; ".join(blocking)
        _log.warning("DRS rule %s in %s %s", rule.name, cluster, message)
        self._metrics.holds.add(1, {"change": "restored" if restored else "held"})
        when = utc_timestamp()
        self._send(
            self._event_factory.new(
                DrsRuleHeld,
                self._vcenter,
                cluster,
                rule.name,
                restored,
                when,
                occurred_at=when,
                vcenter=self._vcenter,
                cluster_moid=cluster,
                name=rule.name,
                reason="host-maintenance",
                message=message,
                restored=restored,
                hosts=list(hosts),
                vms=list(rule.vms),
                pods=list(rule.pods),
            )
        )

    async def _restore(self, cluster: str, name: str, record: DrsOwnership | None) -> None:
        """Undo an intent vCenter refused: a name it would not let us add is not ours."""
        if record is None:
            await self._records.delete(cluster, name)
        else:
            await self._records.put(record)

    def _refused(self, cluster: str, change: Change, reason: str) -> None:
        key = (cluster, change.obj.name)
        previous = self._backoff.get(key)
        attempts = 1 if previous is None else previous.attempts + 1
        delay = min(self._retry_max, self._retry_base * 2 ** (attempts - 1))
        self._backoff[key] = _Backoff(attempts, time.monotonic() + delay, reason)
        _log.warning(
            "vCenter refused %s %s (attempt %d, next in %.1fs): %s",
            change.op,
            change.obj.name,
            attempts,
            delay,
            reason,
        )
        self._conflict(
            cluster, change.obj, "refused", f"vCenter refused the {change.op}: {reason}", attempts
        )

    def _report(self, cluster: str, diff: ClusterDiff) -> None:
        for obj in diff.unowned:
            if (cluster, obj.name) in self._reported:
                continue
            self._reported.add((cluster, obj.name))
            _log.warning(
                "%s in %s is named for this install (%s) but has no ownership record: left "
                "untouched",
                obj.name,
                cluster,
                self._install,
            )
            self._conflict(
                cluster,
                obj,
                "prefix-without-record",
                f"a rule or group named for this install ({self._install}) that it has no "
                "record of; it is never edited or removed (is another install on this vCenter "
                "configured with the same shared.cluster.name?)",
            )
        for drift in diff.drift:
            self._metrics.drift.add(1, {"change": drift.change})
            _log.warning(
                "%s in %s was %s outside hostaffinity; repairing", drift.name, cluster, drift.change
            )
            found, when = drift.found, utc_timestamp()
            self._send(
                self._event_factory.new(
                    DrsRuleDrift,
                    self._vcenter,
                    cluster,
                    drift.name,
                    when,
                    occurred_at=when,
                    vcenter=self._vcenter,
                    cluster_moid=cluster,
                    name=drift.name,
                    change=drift.change,
                    expected_vms=list(drift.expected.vms),
                    found_vms=[] if found is None else list(found.vms),
                )
            )

    def _conflict(
        self, cluster: str, obj: DrsObject, reason: ConflictReason, message: str, attempt: int = 0
    ) -> None:
        self.report_conflict(
            cluster, obj.name, reason, message, vms=obj.vms, pods=obj.pods, attempt=attempt
        )

    def report_conflict(
        self,
        cluster: str,
        name: str,
        reason: ConflictReason,
        message: str,
        *,
        vms: Sequence[str],
        pods: Sequence[str],
        attempt: int = 0,
    ) -> None:
        """`drs.rule.conflict` on the bus and the conflicts metric."""
        self._metrics.conflicts.add(1, {"reason": reason})
        self._send(
            self._event_factory.new(
                DrsRuleConflict,
                self._vcenter,
                cluster,
                name,
                reason,
                *vms,
                *pods,
                attempt,
                vcenter=self._vcenter,
                cluster_moid=cluster,
                name=name,
                reason=reason,
                message=message,
                vms=list(vms),
                pods=list(pods),
            )
        )

    def _applied_event(
        self,
        cluster: str,
        names: Mapping[str, list[str]],
        renamed: Mapping[str, str] | None = None,
    ) -> DrsRulesApplied:
        when = utc_timestamp()
        _log.info(
            "%s %s: added %s, edited %s, removed %s",
            "planned" if self._dry_run else "applied",
            cluster,
            names["add"],
            names["edit"],
            names["remove"],
        )
        return self._event_factory.new(
            DrsRulesApplied,
            self._vcenter,
            cluster,
            when,
            names,
            occurred_at=when,
            vcenter=self._vcenter,
            cluster_moid=cluster,
            added=names["add"],
            edited=names["edit"],
            removed=names["remove"],
            dry_run=self._dry_run,
            renamed=dict(renamed or {}),
        )


def _names(changes: Sequence[Change]) -> dict[str, list[str]]:
    """The names a batch adds, edits and removes, sorted."""
    return {
        op: sorted(c.obj.name for c in changes if c.op == op) for op in ("add", "edit", "remove")
    }


def _renames_in(changes: Sequence[Change], renamed: Mapping[str, str]) -> dict[str, str]:
    """Old name → new name for the objects of `changes` that a rename names."""
    names = {c.obj.name for c in changes}
    return {old: new for old, new in renamed.items() if new in names or old in names}


def _legacy(name: str) -> bool:
    """Named by a release before install identities: no install in the name."""
    parsed = parse_drs_name(name)
    return parsed is not None and parsed.install is None


def _renamed(record: DrsOwnership, new_name: Mapping[str, str]) -> DrsObject:
    """What the record asked for, under its new name and naming its groups' new names."""
    obj = from_record(record)
    return replace(
        obj,
        name=new_name.get(obj.name, obj.name),
        vm_group=new_name.get(obj.vm_group, obj.vm_group),
        host_group=new_name.get(obj.host_group, obj.host_group),
    )


def _state(records: Mapping[str, DrsOwnership], name: str) -> DrsRecordState | None:
    record = records.get(name)
    return None if record is None else record.state


def _took_effect(change: Change, actual: Mapping[str, DrsObject]) -> bool:
    present = actual.get(change.obj.name)
    if change.op == "remove":
        return present is None
    return present is not None and present.same_content(change.obj)


def _with_state(record: DrsOwnership, state: DrsRecordState) -> DrsOwnership:
    return msgspec.structs.replace(record, state=state)
