"""One vCenter's share of the drs-translator's work, in one record, and how it is built.

Each vCenter has its own session, its own keys in the DRS bucket (announcements not yet sent,
ownership records, cluster reports), its own cluster rules and applier, the target the
translator plans for and, when the HA audit is on, its HA settings recorder. They are built
together, so the work never holds one vCenter's parts in six maps that must agree.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from nats.js.kv import KeyValue

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.core.plan import PlannerSettings
from hostaffinity.drs_translator.fleet_leases import FleetLeases
from hostaffinity.drs_translator.fleet_rules import FleetRules
from hostaffinity.drs_translator.ha_settings import HaSettingsRecorder
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.reports import ClusterReports
from hostaffinity.drs_translator.translator import VCenterTarget
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import EventFactory


@dataclass(frozen=True, slots=True)
class Shared:
    """What every vCenter's work is built with: the config, this install's cluster identity and
    token, the DRS bucket, the event outbox, the metrics, the fleet's members and leases
    (`leases` None: this install reaches no fleet hub, or runs dry), how events are built, and
    the Lease check each reconfigure makes right before it is sent."""

    config: DrsTranslatorConfig
    cluster: str
    install: str
    bucket: KeyValue
    outbox: Outbox
    metrics: DrsMetrics
    fleet: FleetMembers
    leases: FleetLeases | None
    events: EventFactory
    ensure_leading: Callable[[], None]


@dataclass(frozen=True, slots=True)
class VCenterWork:
    """One vCenter's parts. `logged_in` is set once its first login is done (its cycles and its
    HA audit wait for it); `ha_settings` is None when the HA audit is off or the run is dry."""

    session: VCenterSession
    kept: KeptAnnouncements
    rules: ClusterRules
    target: VCenterTarget
    logged_in: asyncio.Event
    ha_settings: HaSettingsRecorder | None

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def records(self) -> OwnershipRecords:
        return self.target.records

    @property
    def reports(self) -> ClusterReports:
        return self.target.reports


async def vcenter_work(name: str, session: VCenterSession, shared: Shared) -> VCenterWork:
    """The vCenter's parts, its records and reports loaded from the bucket (not announced yet:
    `announce_unsent` does, once the work holds the record)."""
    own = shared.config.drs
    records = OwnershipRecords(shared.bucket, name, shared.cluster)
    await records.load()
    reports = ClusterReports(shared.bucket, name, shared.cluster)
    await reports.load()
    kept = KeptAnnouncements(shared.bucket, name)
    rules = ClusterRules(session, ensure_leading=shared.ensure_leading)
    applier = DrsApplier(
        rules,
        records,
        kept,
        shared.outbox.put,
        shared.metrics,
        vcenter=name,
        install=shared.install,
        event_factory=shared.events,
        dry_run=own.dry_run,
        retry_base_seconds=own.retry_base_seconds,
        retry_max_seconds=own.retry_max_seconds,
        refresh_seconds=own.shared_rules_refresh_seconds,
    )
    settings = PlannerSettings(
        vcenter=name,
        install=shared.install,
        vm_host_mandatory=own.vm_host_mandatory,
        translate_preferred=own.translate_preferred,
    )
    fleet_rules = None
    if shared.leases is not None:
        fleet_rules = FleetRules(name, shared.leases, shared.fleet, applier, records, rules)
    logged_in = asyncio.Event()
    target = VCenterTarget(settings, applier, records, reports, logged_in.is_set, fleet_rules)
    ha_settings = _ha_settings(name, rules, records, shared)
    return VCenterWork(session, kept, rules, target, logged_in, ha_settings)


def _ha_settings(
    name: str, rules: ClusterRules, records: OwnershipRecords, shared: Shared
) -> HaSettingsRecorder | None:
    """The HA audit's recorder of the vCenter, unless it is off or the run is dry."""
    audit = shared.config.ha_audit
    if not audit.enabled or shared.config.drs.dry_run:
        return None
    return HaSettingsRecorder(shared.bucket, rules, records, name, audit.refresh_seconds)


async def announce_unsent(vcenter: VCenterWork, outbox: Outbox) -> None:
    """The batch an earlier run kept and did not announce: settled with vCenter's records, then
    sent (the outbox's `forget` drops it from the bucket once published)."""
    for announcement in await vcenter.kept.load():
        await vcenter.target.applier.settle(announcement)
        outbox.put(announcement)
