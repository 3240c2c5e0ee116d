"""The drs-translator's work under the service runner: wire the inputs, the vCenter, the loop.

Runs only on the Lease holder (the runner gates it). Order: the bus layout, then per vCenter its
ownership records and its session (logging in on its own: one vCenter down holds back only its
own work and readiness), then the Pod and Namespace informers and the topology watch; the
first plan waits until all three have replayed their current state, so a restart never mistakes
"not yet seen" for "gone" and removes a rule it still needs.

Readiness (declared up front in the spec, `readiness_parts`): the informers and the topology
synced, and per vCenter "vcenter connected: <name>" (logged in, its last cycle did not fail) and
"first DRS cycle done: <name>": with several vCenters, one away is degraded while another is
served, not "not ready" for all.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.model import Namespace, Pod, decode_namespace, decode_pod
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import SOURCE, DrsApplier
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.core.plan import PlannerSettings
from hostaffinity.drs_translator.fleet_leases import FleetLeases
from hostaffinity.drs_translator.fleet_rules import FleetRules
from hostaffinity.drs_translator.ha_settings import HaSettingsRecorder
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.reports import ClusterReports
from hostaffinity.drs_translator.translator import DrsTranslator, Pacing, VCenterTarget
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.fleet_view import follow_fleet_view
from hostaffinity.runtime.bus.hub_leases import HubLeases
from hostaffinity.runtime.bus.layout import DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.bus.topology_feed import follow_topology
from hostaffinity.runtime.kube.client import NAMESPACES, PODS
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.informer import Informer, upsert_or_remove
from hostaffinity.runtime.runner import VCENTER_CONNECTED, ServiceContext, vcenter_part
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import (
    DRS_BUCKET,
    EVENTS_STREAM,
    FLEET_LEASES_BUCKET,
    HUB_DOMAIN,
    Event,
    install_token,
)

_SYNC_POLL_SECONDS: Final = 0.05
_SYNCED: Final = ("pods synced", "namespaces synced", "topology synced")
FIRST_CYCLE: Final = "first DRS cycle done"


def readiness_parts(config: DrsTranslatorConfig) -> list[str]:
    """Every part of /readyz the work adds (the spec declares them up front)."""
    names = [vc.known_as for vc in config.vcenters]
    per_vcenter = [
        vcenter_part(part, n) for part in (VCENTER_CONNECTED, FIRST_CYCLE) for n in names
    ]
    return [*_SYNCED, *per_vcenter]


class DrsTranslatorWork:
    """Translates until cancelled; the translator and each vCenter's cluster rules (by vCenter
    name) stay visible for readiness and tests (the last term's, when the work ran more than
    once)."""

    def __init__(self) -> None:
        self.translator: DrsTranslator | None = None
        self.cluster_rules: dict[str, ClusterRules] = {}
        self.fleet_leases: FleetLeases | None = None

    async def __call__(self, ctx: ServiceContext[DrsTranslatorConfig]) -> None:
        await _translate(ctx, self)


async def _translate(ctx: ServiceContext[DrsTranslatorConfig], work: DrsTranslatorWork) -> None:
    """The work's body (a function of its own, so that the steps read at one indentation)."""
    config, own = ctx.config, ctx.config.drs
    await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, DRS_STREAM, EVENTS_STREAM])
    drs_bucket = await ctx.bus.js.key_value(DRS_BUCKET)
    kept = {vc.known_as: KeptAnnouncements(drs_bucket, vc.known_as) for vc in config.vcenters}

    async def forget(event: Event) -> None:  # an acknowledged event is kept by one vCenter
        for announcements in kept.values():
            await announcements.forget(event)

    topology = await ctx.bus.topology(parked_as=SOURCE)
    metrics = DrsMetrics()
    # Half the runner's drain: the work's own unwinding (a vCenter call in flight) has the rest.
    outbox = Outbox(
        SOURCE, ctx.bus.publish_event, on_published=forget, drain_seconds=config.drain_seconds / 2
    )
    ctx.start(outbox.run(), name="bus-outbox")
    sessions = [VCenterSession(vc) for vc in config.vcenters]
    install = install_token(ctx.cluster.name)
    fleet = FleetMembers(ctx.cluster.name)
    woken: list[DrsTranslator] = []  # the translator, once built: changes of the hub wake it

    def wake() -> None:
        for translator in woken:
            translator.wake()

    leases = None
    # Only an install of a fleet reaches the hub; a dry run takes no lease: it would keep the
    # install that writes from writing.
    if config.nats.fleet_install and not own.dry_run:
        hub = HubLeases(
            ctx.bus.nc,
            HUB_DOMAIN,
            FLEET_LEASES_BUCKET,
            timeout=config.fleet.request_timeout_seconds,
        )
        leases = work.fleet_leases = FleetLeases(hub, ctx.cluster.name, install, wake=wake)
    try:
        targets: list[VCenterTarget] = []
        logged_in: dict[str, asyncio.Event] = {}
        rules: dict[str, ClusterRules] = {}
        work.cluster_rules = rules
        ha_recorders: dict[str, HaSettingsRecorder] = {}
        all_records: dict[str, OwnershipRecords] = {}
        all_reports: dict[str, ClusterReports] = {}
        metrics.count_held(lambda: {name: own.held() for name, own in all_records.items()})
        metrics.count_reports(
            lambda: [r for reports in all_reports.values() for r in reports.by_cluster.values()],
            [vc.known_as for vc in config.vcenters],
        )
        for vc, session in zip(config.vcenters, sessions, strict=True):
            name = vc.known_as
            records = all_records[name] = OwnershipRecords(drs_bucket, name, ctx.cluster.name)
            await records.load()
            reports = all_reports[name] = ClusterReports(drs_bucket, name, ctx.cluster.name)
            await reports.load()
            rules[name] = ClusterRules(session)
            applier = DrsApplier(
                rules[name],
                records,
                kept[name],
                outbox.put,
                metrics,
                vcenter=name,
                install=install,
                dry_run=own.dry_run,
                retry_base_seconds=own.retry_base_seconds,
                retry_max_seconds=own.retry_max_seconds,
                refresh_seconds=own.shared_rules_refresh_seconds,
            )
            for announcement in await kept[name].load():  # a batch an earlier run did not announce
                await applier.settle(announcement)
                outbox.put(announcement)
            settings = PlannerSettings(
                vcenter=name,
                install=install,
                vm_host_mandatory=own.vm_host_mandatory,
                translate_preferred=own.translate_preferred,
            )
            logged_in[name] = asyncio.Event()
            fleet_rules = None
            if leases is not None:
                fleet_rules = FleetRules(name, leases, fleet, applier, records, rules[name])
            targets.append(
                VCenterTarget(
                    settings, applier, records, reports, logged_in[name].is_set, fleet_rules
                )
            )
            if config.ha_audit.enabled and not own.dry_run:
                ha_recorders[name] = HaSettingsRecorder(
                    drs_bucket, rules[name], records, name, config.ha_audit.refresh_seconds
                )
        translator = work.translator = DrsTranslator(
            targets,
            None
            if own.dry_run
            else EventRecorder(ctx.kube, f"hostaffinity-{SOURCE}", ctx.identity),
            metrics,
            physical_cluster_wide=config.shared.reads_hostname_as_host,
            pacing=Pacing(own.debounce_seconds, own.resync_seconds, own.error_retry_seconds),
        )
        pods: Informer[Pod] = Informer(
            ctx.kube,
            PODS,
            upsert_or_remove(translator.upsert_pod, translator.remove_pod),
            decode_pod,
        )
        namespaces: Informer[Namespace] = Informer(
            ctx.kube,
            NAMESPACES,
            upsert_or_remove(translator.upsert_namespace, translator.remove_namespace),
            decode_namespace,
        )
        woken.append(translator)
        pods_synced, namespaces_synced, topology_synced = _SYNCED
        ctx.add_readiness(pods_synced, pods.synced.is_set)
        ctx.add_readiness(namespaces_synced, namespaces.synced.is_set)
        for session, name in zip(sessions, rules, strict=True):
            done = logged_in[name]
            ctx.start(_log_in(session, done, translator.wake), name=f"vcenter {name} login")
            served = _VCenterServed(session, translator, name)
            connected = vcenter_part(VCENTER_CONNECTED, name)
            ctx.add_readiness(connected, served.now, vcenter=name, detail=served.why_not)
            first_cycle = vcenter_part(FIRST_CYCLE, name)
            ctx.add_readiness(first_cycle, _cycled(translator, name), vcenter=name)
        ctx.add_readiness(topology_synced, lambda: translator.topology_synced)
        if leases is not None:
            ctx.start(
                follow_fleet_view(ctx.bus.js, fleet, link=ctx.bus.link_epoch, on_change=wake),
                name="fleet-view",
            )
            ctx.start(leases.run(), name="fleet-leases")
        ctx.start(pods.run(), name="pods")
        ctx.start(namespaces.run(), name="namespaces")
        ctx.start(
            follow_topology(topology, translator.on_topology, link=ctx.bus.link_epoch),
            name="topology",
        )
        for name, recorder in ha_recorders.items():
            ctx.start(_after(logged_in[name], recorder.run), name=f"ha-settings {name}")
        # Informers hand their first list to workers: wait until those have run too.
        while True:
            if pods.caught_up() and namespaces.caught_up() and translator.topology_synced:
                break
            await asyncio.sleep(_SYNC_POLL_SECONDS)
        # A full collection over 150,000 pods' objects paused the loop ~0.5 s in the middle of
        # a plan (whose sets and tuples are what trigger collections): keep them out of it.
        freeze_gc_after_initial_load()
        await translator.run()
    finally:
        for session in sessions:
            await session.close()


async def _log_in(session: VCenterSession, done: asyncio.Event, wake: Callable[[], None]) -> None:
    """The first login (retried until vCenter answers); then that vCenter's first cycle runs."""
    await session.start_when_reachable()
    done.set()
    wake()


async def _after(done: asyncio.Event, work: Callable[[], Awaitable[None]]) -> None:
    """`work`, once that vCenter's first login is done (its reads would only fail before)."""
    await done.wait()
    await work()


class _VCenterServed:
    """Readiness of one vCenter's connection: logged in, and its last DRS cycle did not fail."""

    def __init__(self, session: VCenterSession, translator: DrsTranslator, vcenter: str) -> None:
        self._session = session
        self._translator = translator
        self._vcenter = vcenter

    def now(self) -> bool:
        return self._session.connected() and self._vcenter not in self._translator.failing

    def why_not(self) -> str:
        failure = self._translator.failing.get(self._vcenter)
        if failure is not None:
            return f"away since {failure.since}: {failure.why}"
        return "" if self._session.connected() else "not logged in yet (the log says why)"


def _cycled(translator: DrsTranslator, vcenter: str) -> Callable[[], bool]:
    """Readiness of one vCenter: one of its DRS cycles has succeeded."""
    return lambda: translator.completed[vcenter] > 0
