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
from typing import Any, Final

from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.affinity.index import freeze_gc_after_initial_load
from hostaffinity.affinity.model import decode_namespace, decode_pod
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.fleet_leases import FleetLeases
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.translator import DrsTranslator
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.drs_translator.vcenter_work import (
    Shared,
    VCenterWork,
    announce_unsent,
    vcenter_work,
)
from hostaffinity.runtime.bus.fleet_view import follow_fleet_view
from hostaffinity.runtime.bus.hub_leases import HubLeases
from hostaffinity.runtime.bus.kv import TopologyStore
from hostaffinity.runtime.bus.layout import DRS_STREAM, TOPOLOGY_STREAM
from hostaffinity.runtime.bus.outbox import Outbox
from hostaffinity.runtime.bus.topology_feed import follow_topology
from hostaffinity.runtime.kube.client import NAMESPACES, PODS
from hostaffinity.runtime.kube.events import EventRecorder
from hostaffinity.runtime.kube.feeds import Feed, informers
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
    config = ctx.config
    await ctx.bus.wait_for_layout([TOPOLOGY_STREAM, DRS_STREAM, EVENTS_STREAM])
    vcenters: list[VCenterWork] = []

    async def forget(event: Event) -> None:  # an acknowledged event is kept by one vCenter
        for vcenter in vcenters:
            await vcenter.kept.forget(event)

    topology = await ctx.bus.topology(parked_as=ctx.service)
    # Half the runner's drain: the work's own unwinding (a vCenter call in flight) has the rest.
    outbox = Outbox(
        ctx.service,
        ctx.bus.publish_event,
        on_published=forget,
        drain_seconds=config.drain_seconds / 2,
    )
    ctx.start(outbox.run(), name="bus-outbox")
    sessions = [VCenterSession(vc) for vc in config.vcenters]
    woken: list[DrsTranslator] = []  # the translator, once built: changes of the hub wake it

    def wake() -> None:
        for translator in woken:
            translator.wake()

    shared = await _shared(ctx, work, outbox, wake)
    try:
        for vc, session in zip(config.vcenters, sessions, strict=True):
            vcenters.append(await vcenter_work(vc.known_as, session, shared))
            await announce_unsent(vcenters[-1], outbox)
        work.cluster_rules = {vcenter.name: vcenter.rules for vcenter in vcenters}
        _count(shared.metrics, vcenters)
        translator = work.translator = _translator(ctx, vcenters, shared.metrics)
        woken.append(translator)
        feeds = informers(ctx.kube, _feeds(translator))
        _add_readiness(ctx, translator, vcenters, feeds)
        _start(ctx, shared, translator, vcenters, feeds, topology, wake)
        # Informers hand their first list to workers: wait until those have run too.
        while True:
            if all(feed.caught_up() for feed in feeds) and translator.topology_synced:
                break
            await asyncio.sleep(_SYNC_POLL_SECONDS)
        # A full collection over 150,000 pods' objects paused the loop ~0.5 s in the middle of
        # a plan (whose sets and tuples are what trigger collections): keep them out of it.
        freeze_gc_after_initial_load()
        await translator.run()
    finally:
        for session in sessions:
            await session.close()


async def _shared(
    ctx: ServiceContext[DrsTranslatorConfig],
    work: DrsTranslatorWork,
    outbox: Outbox,
    wake: Callable[[], None],
) -> Shared:
    """What every vCenter's work is built with. Only an install of a fleet reaches the hub; a
    dry run takes no lease: it would keep the install that writes from writing."""
    config = ctx.config
    install = install_token(ctx.cluster.name)
    leases = None
    if config.nats.fleet_install and not config.drs.dry_run:
        hub = HubLeases(
            ctx.bus.nc,
            HUB_DOMAIN,
            FLEET_LEASES_BUCKET,
            timeout=config.fleet.request_timeout_seconds,
        )
        leases = work.fleet_leases = FleetLeases(hub, ctx.cluster.name, install, wake=wake)
    return Shared(
        config,
        ctx.cluster.name,
        install,
        await ctx.bus.js.key_value(DRS_BUCKET),
        outbox,
        DrsMetrics(),
        FleetMembers(ctx.cluster.name),
        leases,
        ctx.event_factory,
        ctx.ensure_leading,
    )


def _count(metrics: DrsMetrics, vcenters: list[VCenterWork]) -> None:
    """Where the gauges of held rules and of the cluster reports read."""
    metrics.count_held(lambda: {vcenter.name: vcenter.records.held() for vcenter in vcenters})
    metrics.count_reports(
        lambda: [r for vcenter in vcenters for r in vcenter.reports.by_cluster.values()],
        [vcenter.name for vcenter in vcenters],
    )


def _translator(
    ctx: ServiceContext[DrsTranslatorConfig], vcenters: list[VCenterWork], metrics: DrsMetrics
) -> DrsTranslator:
    own = ctx.config.drs
    recorder = None
    if not own.dry_run:
        recorder = EventRecorder(ctx.kube, ctx.program, ctx.identity)
    return DrsTranslator(
        [vcenter.target for vcenter in vcenters],
        recorder,
        metrics,
        physical_anti_affinity=ctx.config.shared.physical_anti_affinity,
        pacing=own,
    )


def _feeds(translator: DrsTranslator) -> list[Feed[Any]]:
    """The informers' table, in the order of `_SYNCED` (the topology is the KV watch's)."""
    return [
        Feed(PODS, upsert_or_remove(translator.upsert_pod, translator.remove_pod), decode_pod),
        Feed(
            NAMESPACES,
            upsert_or_remove(translator.upsert_namespace, translator.remove_namespace),
            decode_namespace,
        ),
    ]


def _add_readiness(
    ctx: ServiceContext[DrsTranslatorConfig],
    translator: DrsTranslator,
    vcenters: list[VCenterWork],
    feeds: list[Informer[Any]],
) -> None:
    """The parts `readiness_parts` declared: each feed synced, each vCenter served and cycled."""
    *informers_synced, topology_synced = _SYNCED
    for part, feed in zip(informers_synced, feeds, strict=True):
        ctx.add_readiness(part, feed.synced.is_set)
    for vcenter in vcenters:
        served = _VCenterServed(vcenter.session, translator, vcenter.name)
        connected = vcenter_part(VCENTER_CONNECTED, vcenter.name)
        ctx.add_readiness(connected, served.now, vcenter=vcenter.name, detail=served.why_not)
        first_cycle = vcenter_part(FIRST_CYCLE, vcenter.name)
        ctx.add_readiness(first_cycle, _cycled(translator, vcenter.name), vcenter=vcenter.name)
    ctx.add_readiness(topology_synced, lambda: translator.topology_synced)


def _start(
    ctx: ServiceContext[DrsTranslatorConfig],
    shared: Shared,
    translator: DrsTranslator,
    vcenters: list[VCenterWork],
    feeds: list[Informer[Any]],
    topology: TopologyStore,
    wake: Callable[[], None],
) -> None:
    """Every task beside the loop: the logins, the fleet's view and leases, the feeds, the HA
    audits (each after its vCenter's first login)."""
    for vcenter in vcenters:
        login = _log_in(vcenter.session, vcenter.logged_in, translator.wake)
        ctx.start(login, name=f"vcenter {vcenter.name} login")
    if shared.leases is not None:
        view = follow_fleet_view(ctx.bus.js, shared.fleet, link=ctx.bus.link_epoch, on_change=wake)
        ctx.start(view, name="fleet-view")
        ctx.start(shared.leases.run(), name="fleet-leases")
    for feed, name in zip(feeds, ("pods", "namespaces"), strict=True):
        ctx.start(feed.run(), name=name)
    ctx.start(
        follow_topology(topology, translator.on_topology, link=ctx.bus.link_epoch),
        name="topology",
    )
    for vcenter in vcenters:
        if vcenter.ha_settings is not None:
            audit = _after(vcenter.logged_in, vcenter.ha_settings.run)
            ctx.start(audit, name=f"ha-settings {vcenter.name}")


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
