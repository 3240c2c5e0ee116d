"""The drs-translator's work under the service runner: wire the inputs, the vCenter, the loop.

Runs only on the Lease holder (the runner gates it). Order: the bus layout and our ownership
records, the vCenter session, then the Pod and Namespace informers and the topology watch; the
first plan waits until all three have replayed their current state, so a restart never mistakes
"not yet seen" for "gone" and removes a rule it still needs.
"""

import asyncio
from typing import Final

from hostaffinity.affinity.model import Namespace, Pod, decode_namespace, decode_pod
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import SOURCE, DrsApplier
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.ha_settings import HaSettingsRecorder
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.planner import PlannerSettings
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.translator import DrsTranslator, Pacing
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.layout import DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.bus.topology_feed import follow_topology
from hostaffinity.runtime.kube.client import NAMESPACES, PODS
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.informer import Informer, upsert_or_remove
from hostaffinity.runtime.runner import ServiceContext
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import DRS_BUCKET, EVENTS_STREAM

_SYNC_POLL_SECONDS: Final = 0.05


class DrsTranslatorWork:
    """Translates until cancelled; the translator and the vCenter cluster it reconfigures stay
    visible for readiness and tests (the last term's, when the work ran more than once)."""

    def __init__(self) -> None:
        self.translator: DrsTranslator | None = None
        self.cluster_rules: ClusterRules | None = None

    async def __call__(self, ctx: ServiceContext[DrsTranslatorConfig]) -> None:
        await _translate(ctx, self)


async def _translate(ctx: ServiceContext[DrsTranslatorConfig], work: DrsTranslatorWork) -> None:
    """The work's body (a function of its own, so that the steps read at one indentation)."""
    config = ctx.config
    await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, DRS_STREAM, EVENTS_STREAM])
    drs_bucket = await ctx.bus.js.key_value(DRS_BUCKET)
    records = OwnershipRecords(drs_bucket, config.vcenter_label)
    await records.load()
    kept = KeptAnnouncements(drs_bucket, config.vcenter_label)
    topology = await ctx.bus.topology()
    metrics = DrsMetrics()
    outbox = Outbox(SOURCE, ctx.bus.publish_event, on_published=kept.forget)
    ctx.start(outbox.run(), name="bus-outbox")
    session = VCenterSession(config.vcenter)
    ctx.add_readiness("vcenter connected", session.connected)
    try:
        await session.start_when_reachable()
        cluster_rules = work.cluster_rules = ClusterRules(session)
        applier = DrsApplier(
            cluster_rules,
            records,
            kept,
            outbox.put,
            metrics,
            vcenter=config.vcenter_label,
            dry_run=config.dry_run,
            retry_base_seconds=config.retry_base_seconds,
            retry_max_seconds=config.retry_max_seconds,
        )
        for announcement in await kept.load():  # a batch an earlier run did not announce
            await applier.settle(announcement)
            outbox.put(announcement)
        translator = work.translator = DrsTranslator(
            PlannerSettings(
                vcenter=config.vcenter_label,
                vm_host_mandatory=config.vm_host_mandatory,
                translate_preferred=config.translate_preferred,
            ),
            applier,
            records,
            None
            if config.dry_run
            else EventRecorder(ctx.kube, f"hostaffinity-{SOURCE}", ctx.identity),
            metrics,
            physical_cluster_wide=config.shared.reads_hostname_as_host,
            pacing=Pacing(
                config.debounce_seconds, config.resync_seconds, config.error_retry_seconds
            ),
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
        ctx.add_readiness("topology synced", lambda: translator.topology_synced)
        ctx.add_readiness("first DRS cycle done", lambda: translator.cycles > 0)
        ctx.start(pods.run(), name="pods")
        ctx.start(namespaces.run(), name="namespaces")
        ctx.start(
            follow_topology(topology, translator.on_topology, link=ctx.bus.link_epoch),
            name="topology",
        )
        if config.ha_audit.enabled and not config.dry_run:
            ha = HaSettingsRecorder(
                drs_bucket,
                cluster_rules,
                records,
                config.vcenter_label,
                config.ha_audit.refresh_seconds,
            )
            ctx.start(ha.run(), name="ha-settings")
        # Informers hand their first list to workers: wait until those have run too.
        while True:
            if pods.caught_up() and namespaces.caught_up() and translator.topology_synced:
                break
            await asyncio.sleep(_SYNC_POLL_SECONDS)
        await translator.run()
    finally:
        await session.close()
