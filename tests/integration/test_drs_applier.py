"""The applier against vcsim and a real nats-server: refused batches, backoff, dry run."""

import asyncio
from typing import Any

import pytest
from pyVmomi import vim

from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.core.plan import ClusterPlan
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import (
    DRS_BUCKET,
    DrsName,
    DrsObjectKind,
    DrsRuleConflict,
    DrsRulesApplied,
    Event,
    EventFactory,
)
from tests.e2e.drs_harness import add_anti_affinity_rule, cluster_of, drs_state
from tests.platform.vcsim import Vcsim, VcsimFactory

_vim: Any = vim
INSTALL = "test-cluster"


def ours(kind: DrsObjectKind, digest: str) -> str:
    """A name this install writes (`digest`: one hex digit, repeated)."""
    return str(DrsName(kind, INSTALL, digest * 12))


def anti(cluster: str, name: str, *vms: str) -> DrsObject:
    return DrsObject(name, "vm-anti-affinity", cluster, vms=tuple(sorted(vms)))


def plan_of(cluster: str, *objects: DrsObject) -> ClusterPlan:
    return ClusterPlan(cluster, {o.name: o for o in objects})


@pytest.fixture
def inventory(vcsim: VcsimFactory) -> tuple[Vcsim, vim.ServiceInstance, str, list[str]]:
    """vcsim with 3 hosts and 6 VMs: (vcsim, a session, the cluster moid, VM moids sorted)."""
    vc = vcsim(hosts=3, vms=6)
    si = vc.connect()
    cluster = cluster_of(si)
    return vc, si, cluster._moId, sorted(vm._moId for vm in cluster.resourcePool.vm)


async def test_a_refused_change_is_isolated_reported_and_backed_off(
    inventory: tuple[Vcsim, vim.ServiceInstance, str, list[str]], bus: Bus
) -> None:
    vc, si, cluster, vms = inventory
    published: list[Event] = []

    drs_bucket = await bus.js.key_value(DRS_BUCKET)
    records = OwnershipRecords(drs_bucket, "vcsim", INSTALL)
    kept = KeptAnnouncements(drs_bucket, "vcsim")
    first = DrsObject(ours("vm-group", "a"), "vm-group", cluster, vms=(vms[0],))
    async with VCenterSession(vc.settings()) as session:
        config = ClusterRules(session)
        applier = DrsApplier(
            config,
            records,
            kept,
            published.append,
            DrsMetrics(),
            vcenter="vcsim",
            install=INSTALL,
            event_factory=EventFactory("drs-translator"),
            retry_base_seconds=0.2,
        )
        await applier.apply(plan_of(cluster, first))
        # An administrator takes the name we are about to use, after our last read of vCenter.
        taken = ours("vm-anti-affinity", "b")
        add_anti_affinity_rule(si, taken, [vms[4]])
        by_hand = drs_state(si)[f"rule:{taken}"]
        wider = DrsObject(first.name, "vm-group", cluster, vms=(vms[0], vms[1]))
        second = anti(cluster, taken, vms[2], vms[3])
        before = dict(config.calls)
        await applier.apply(plan_of(cluster, wider, second))

        state = drs_state(si)
        assert sorted(state[f"group:{first.name}"]["vm"]) == list(wider.vms)  # the rest applied
        assert state[f"rule:{taken}"] == by_hand  # the stranger's rule untouched
        assert set(records.of(cluster)) == {first.name}  # no record for a name we never got
        refused = [e for e in published if isinstance(e, DrsRuleConflict)]
        assert [(e.name, e.reason) for e in refused] == [(taken, "refused")]
        assert applier.next_retry() is not None
        print(
            "vCenter calls for a refused batch:",
            {k: v - before.get(k, 0) for k, v in config.calls.items()},
        )

        await asyncio.sleep(0.3)  # past the backoff: the name is now seen as not ours
        await applier.apply(plan_of(cluster, wider, second), reread=True)
        assert drs_state(si)[f"rule:{taken}"] == by_hand
        reasons = [e.reason for e in published if isinstance(e, DrsRuleConflict)]
        assert reasons == ["refused", "prefix-without-record"]


async def test_dry_run_plans_and_publishes_but_writes_nothing(
    inventory: tuple[Vcsim, vim.ServiceInstance, str, list[str]], bus: Bus
) -> None:
    vc, si, cluster, vms = inventory
    kv = await bus.js.key_value(DRS_BUCKET)
    kept = KeptAnnouncements(kv, "vcsim")
    records = OwnershipRecords(kv, "vcsim", INSTALL)
    published: list[Event] = []

    async with VCenterSession(vc.settings()) as session:
        config = ClusterRules(session)
        applier = DrsApplier(
            config,
            records,
            kept,
            published.append,
            DrsMetrics(),
            vcenter="vcsim",
            install=INSTALL,
            event_factory=EventFactory("drs-translator"),
            dry_run=True,
        )
        name = ours("vm-anti-affinity", "c")
        await applier.apply(plan_of(cluster, anti(cluster, name, *vms[:2])))
    assert drs_state(si) == {}
    assert "ReconfigureComputeResource_Task" not in config.calls
    await records.load()
    assert records.by_cluster == {}
    (applied,) = published
    assert isinstance(applied, DrsRulesApplied)
    assert (applied.added, applied.dry_run) == ([name], True)


async def test_a_record_that_does_not_decode_is_left_out_so_its_rule_is_never_touched(
    bus: Bus,
) -> None:
    kv = await bus.js.key_value(DRS_BUCKET)
    good = anti("domain-c1", "hostaffinity-anti-good", "vm-1", "vm-2")
    await OwnershipRecords(kv, "vcsim", INSTALL).put(
        good.record("vcsim", state="applied", recorded_at="t")
    )
    await kv.put("rule.vcsim.domain-c1.hostaffinity-anti-bad", b"{not json")
    await kv.put("rule.other.domain-c1.hostaffinity-anti-x", b"{}")
    records = OwnershipRecords(kv, "vcsim", INSTALL)
    await records.load()
    assert list(records.by_cluster) == ["domain-c1"]
    assert list(records.of("domain-c1")) == [good.name]
