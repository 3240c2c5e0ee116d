"""The translator's loop stops when cancelled, even when a NATS call of its cycle swallowed the
cancellation (Python 3.11's `asyncio.wait_for`, python/cpython#86296)."""

import asyncio
import sys
from collections.abc import Sequence

from hostaffinity.affinity.model import Namespace, ObjectMeta
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.core.diff import Change
from hostaffinity.drs_translator.core.plan import PlannerSettings
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.reports import ClusterReports
from hostaffinity.drs_translator.translator import DrsTranslator, VCenterTarget
from hostaffinity.runtime.bus.kv import Bootstrapped, HostChange, NodeChange
from hostaffinity.schema import Event, EventFactory
from tests.platform.builders.drs import INSTALL, VCENTER, GatedKeyValue, pod, topology

WEB = {"app": "web"}


class VCenterDouble:
    """One cluster with no rules yet; every reconfigure succeeds."""

    def __init__(self) -> None:
        self.reconfigures = 0

    async def read(self, cluster_moid: str) -> dict[str, DrsObject]:
        return {}

    async def reconfigure(self, cluster_moid: str, changes: Sequence[Change]) -> None:
        self.reconfigures += 1


async def test_a_stop_swallowed_by_a_records_write_ends_the_loop() -> None:
    kv = GatedKeyValue()
    vcenter = VCenterDouble()
    sent: list[Event] = []
    metrics = DrsMetrics()
    records = OwnershipRecords(kv, VCENTER, INSTALL)  # type: ignore[arg-type]
    kept = KeptAnnouncements(kv, VCENTER)  # type: ignore[arg-type]
    applier = DrsApplier(
        vcenter,
        records,
        kept,
        sent.append,
        metrics,
        vcenter=VCENTER,
        install=INSTALL,
        event_factory=EventFactory("drs-translator"),
    )  # type: ignore[arg-type]
    reports = ClusterReports(kv, VCENTER, INSTALL)  # type: ignore[arg-type]
    target = VCenterTarget(
        PlannerSettings(vcenter=VCENTER, install=INSTALL), applier, records, reports
    )
    translator = DrsTranslator([target], None, metrics)
    placements, hosts = topology()
    for node, placement in placements.items():
        translator.on_topology(NodeChange(node=node, placement=placement, revision=1))
    for moid, host in hosts.items():
        translator.on_topology(HostChange(moid=moid, host=host, revision=1))
    translator.on_topology(Bootstrapped())
    translator.upsert_namespace(Namespace(metadata=ObjectMeta(name="default")))
    for node in ("node1", "node2"):  # two replicas apart on two hosts: one rule to add
        translator.upsert_pod(pod(f"web-{node}", node, WEB, apart_from=WEB))

    loop = asyncio.create_task(translator.run())
    try:
        await asyncio.wait_for(kv.waiting.wait(), 5.0)  # the `pending` record is being written
        kv.ack.set_result(1)  # its ack and the stop arrive in the same loop turn
        loop.cancel()
        done, _ = await asyncio.wait({loop}, timeout=2.0)
        assert loop in done, "the translator went on waiting for work after it was cancelled"
        assert loop.cancelled()
        if sys.version_info < (3, 12):  # 3.11's wait_for swallowed it: the cycle went on
            assert vcenter.reconfigures == 1
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
