"""Each vCenter has its own loop: one whose calls hang holds back none of another's cycles, and
each gets only the rules of its own nodes' VMs (moids repeat across vCenters)."""

import asyncio
from collections.abc import Sequence

import msgspec

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
from hostaffinity.schema import EventFactory, host_id
from tests.platform.builders.drs import INSTALL, VCENTER, pod, topology

OTHER = "vc-2"
WEB, API = {"app": "web"}, {"app": "api"}


class MemoryKeyValue:
    """The ownership bucket, in memory: every put and delete answers at once."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    async def put(self, key: str, value: bytes) -> int:
        self.values[key] = value
        return len(self.values)

    async def delete(self, key: str) -> None:
        self.values.pop(key, None)


class ClusterDouble:
    """One vCenter's clusters, no rules yet; `hang` makes every call wait for ever (a vCenter
    that stopped answering mid-call)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.sent: list[tuple[str, list[tuple[str, ...]]]] = []

    async def read(self, cluster_moid: str) -> dict[str, DrsObject]:
        if self.hang:
            await asyncio.Event().wait()
        return {}

    async def reconfigure(self, cluster_moid: str, changes: Sequence[Change]) -> None:
        self.sent.append((cluster_moid, [tuple(c.obj.vms) for c in changes if c.obj.is_rule]))


def target(vcenter: str, cluster: ClusterDouble, kv: MemoryKeyValue) -> VCenterTarget:
    records = OwnershipRecords(kv, vcenter, INSTALL)  # type: ignore[arg-type]
    kept = KeptAnnouncements(kv, vcenter)  # type: ignore[arg-type]
    applier = DrsApplier(
        cluster,
        records,
        kept,
        lambda _: None,
        DrsMetrics(),
        vcenter=vcenter,
        install=INSTALL,
        event_factory=EventFactory("drs-translator"),
    )  # type: ignore[arg-type]
    reports = ClusterReports(kv, vcenter, INSTALL)  # type: ignore[arg-type]
    return VCenterTarget(
        PlannerSettings(vcenter=vcenter, install=INSTALL), applier, records, reports
    )


async def test_a_hanging_vcenter_holds_back_none_of_the_others_cycles() -> None:
    kv = MemoryKeyValue()
    ours, hanging = ClusterDouble(), ClusterDouble(hang=True)
    translator = DrsTranslator(
        [target(OTHER, hanging, kv), target(VCENTER, ours, kv)], None, DrsMetrics()
    )
    placements, hosts = topology()
    # node4..node6 are in the other vCenter, on hosts with the same moids as ours.
    for node, placement in placements.items():
        vcenter = OTHER if node in ("node4", "node5", "node6") else VCENTER
        moved = msgspec.structs.replace(placement, vcenter=vcenter)
        translator.on_topology(NodeChange(node=node, placement=moved, revision=1))
    for moid, host in hosts.items():
        for vcenter in (VCENTER, OTHER):
            theirs = msgspec.structs.replace(host, vcenter=vcenter)
            translator.on_topology(HostChange(moid=host_id(moid, vcenter), host=theirs, revision=1))
    translator.on_topology(Bootstrapped())
    translator.upsert_namespace(Namespace(metadata=ObjectMeta(name="default")))
    for node in ("node1", "node2"):
        translator.upsert_pod(pod(f"web-{node}", node, WEB, apart_from=WEB))
    for node in ("node4", "node5"):
        translator.upsert_pod(pod(f"api-{node}", node, API, apart_from=API))

    loop = asyncio.create_task(translator.run())
    try:
        for _ in range(200):
            if ours.sent:
                break
            await asyncio.sleep(0.01)
        assert ours.sent == [("domain-c1", [("vm1", "vm2")])]  # only our nodes' VMs
        translator.upsert_pod(pod("web-node3", "node3", WEB, apart_from=WEB))
        for _ in range(200):
            if len(ours.sent) == 2:
                break
            await asyncio.sleep(0.01)
        assert [vms for _, vms in ours.sent] == [[("vm1", "vm2")], [("vm1", "vm2", "vm3")]]
        assert hanging.sent == []
        assert translator.completed == {VCENTER: 2, OTHER: 0}
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
