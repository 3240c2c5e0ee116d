"""The drs-translator's work under the service runner: wire the inputs, the vCenter, the loop.

Runs only on the Lease holder (the runner gates it). Order: the bus layout, then per vCenter its
ownership records and its session (logging in on its own: one vCenter down holds back only its
own work and readiness), then the Pod and Namespace informers and the topology watch; the
first plan waits until all three have replayed their current state, so a restart never mistakes
"not yet seen" for "gone" and removes a rule it still needs.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.model import Namespace, Pod, decode_namespace, decode_pod
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import SOURCE, DrsApplier
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.ha_settings import HaSettingsRecorder
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.planner import PlannerSettings
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.reports import ClusterReports
from hostaffinity.drs_translator.translator import DrsTranslator, Pacing, VCenterTarget
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.layout import DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.bus.topology_feed import follow_topology
from hostaffinity.runtime.kube.client import NAMESPACES, PODS
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.informer import Informer, upsert_or_remove
from hostaffinity.runtime.runner import ServiceContext
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import DRS_BUCKET, EVENTS_STREAM, Event, install_token

_SYNC_POLL_SECONDS: Final = 0.05


class DrsTranslatorWork:
    """Translates until cancelled; the translator and each vCenter's cluster rules (by vCenter
    name) stay visible for readiness and tests (the last term's, when the work ran more than
    once)."""

    def __init__(self) -> None:
        self.translator: DrsTranslator | None = None
        self.cluster_rules: dict[str, ClusterRules] = {}

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
            lambda: [r for reports in all_reports.values() for r in reports.by_cluster.values()]
        )
        for vc, session in zip(config.vcenters, sessions, strict=True):
            name = vc.known_as
            ctx.add_readiness(f"vcenter connected: {name}", session.connected)
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
            targets.append(
                VCenterTarget(settings, applier, records, reports, logged_in[name].is_set)
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
        ctx.add_readiness("pods synced", pods.synced.is_set)
        ctx.add_readiness("namespaces synced", namespaces.synced.is_set)
        for session, name in zip(sessions, rules, strict=True):
            done = logged_in[name]
            ctx.start(_log_in(session, done, translator.wake), name=f"vcenter {name} login")
        ctx.add_readiness("topology synced", lambda: translator.topology_synced)
        for name in rules:
            ctx.add_readiness(f"first DRS cycle done: {name}", _cycled(translator, name))
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


def _cycled(translator: DrsTranslator, vcenter: str) -> Callable[[], bool]:
    """Readiness of one vCenter: one of its DRS cycles has succeeded."""
    return lambda: translator.completed[vcenter] > 0
