"""Who writes a fleet group's rule, decision by decision: one install's FleetRules against vcsim,
its own bus joined to the hub as they ship (its leases, as its drs-translator), another install
played by a second lease holder on its own bus and by the fleet view. The holder adds, edits by
the rule's key, adopts a rule it did not make, removes one no longer wanted and hands one over
when its members left; an install without the lease writes nothing and forgets a record it
kept; a rule over more VMs than hosts is held."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim

from hostaffinity.affinity.fleet_groups import FleetMembers, own_members
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import ObjectMeta, Pod, PodSpec
from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.fleet_leases import FleetLeases, LeaseSubject
from hostaffinity.drs_translator.fleet_rules import FleetRules
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.hub_leases import HubLeases
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import (
    DRS_BUCKET,
    FLEET_LEASES_BUCKET,
    HUB_DOMAIN,
    LABEL_FLEET_GROUP,
    DrsRuleConflict,
    EsxiHost,
    Event,
    EventFactory,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_lease_key,
    fleet_rule_name,
    label_value,
)
from tests.e2e.drs_harness import cluster_of, drs_state, reconfigure
from tests.e2e.harness import eventually
from tests.platform.fleet_hub import FleetHub
from tests.platform.vcsim import Vcsim, VcsimFactory

_vim: Any = vim
GROUP = "payments-db"
ME = "cluster-me"


@dataclass
class World:
    """This install's view of vcsim (3 hosts, node-i on VM node-i), its FleetRules, and the
    other install: its lease store and its members in this install's fleet view."""

    si: Any
    cluster: str
    placements: dict[str, NodePlacement]
    hosts: dict[str, EsxiHost]
    rules: FleetRules
    leases: FleetLeases
    theirs: FleetLeases
    fleet: FleetMembers
    records: OwnershipRecords
    index: ClusterIndex = field(default_factory=ClusterIndex)
    events: list[Event] = field(default_factory=list)

    @property
    def rule(self) -> str:
        return fleet_rule_name(self.cluster, GROUP)

    def vm(self, node: str) -> str:
        return self.placements[node].vm_moid

    def ours(self, *nodes: str) -> None:
        """This install's members of the group: one pod on each node."""
        for key in [r.key for r in own_members(self.index)]:
            self.index.remove_pod(key)
        for node in nodes:
            meta = ObjectMeta(
                name=f"db-{node}", namespace="shop", labels={LABEL_FLEET_GROUP: GROUP}
            )
            self.index.upsert_pod(Pod(metadata=meta, spec=PodSpec(node_name=node)))

    def elsewhere(self, *nodes: str) -> None:
        """The other install's members, on these nodes' VMs, as the fleet view places them."""
        replicas = [
            ReplicaPlacement(
                pod=f"db-{node}",
                host_name=self.placements[node].host_name,
                host_id=f"uuid/{self.placements[node].host_moid}",
                vm_moid=self.vm(node),
                vsphere_cluster_moid=self.cluster,
            )
            for node in nodes
        ]
        summary = WorkloadPlacement(
            cluster="cluster-other",
            namespace="shop",
            kind="StatefulSet",
            name="db",
            fleet_group=GROUP,
            replicas=replicas,
        )
        self.fleet.put("other.workload.shop.StatefulSet.db", summary)

    async def cycle(self) -> None:
        """A translator cycle, then a round of the leases (and the cycle again, as the lease's
        change wakes the translator)."""
        await self.rules.cycle(own_members(self.index), self.placements, self.hosts)
        await self.leases.tick()
        await self.rules.cycle(own_members(self.index), self.placements, self.hosts)

    def vcenter_vms(self) -> list[str] | None:
        found = drs_state(self.si).get(f"rule:{self.rule}")
        return None if found is None else sorted(found["vm"])

    def key(self) -> int:
        return int(drs_state(self.si)[f"rule:{self.rule}"]["key"])


def topology(si: Any, cluster: Any) -> tuple[dict[str, NodePlacement], dict[str, EsxiHost]]:
    placements = {}
    for vm in cluster.resourcePool.vm:
        host = vm.runtime.host
        placements[vm.name] = NodePlacement(
            node=vm.name,
            vm_moid=vm._moId,
            bios_uuid="",
            instance_uuid="",
            host_moid=host._moId,
            host_name=host.name,
            host_label=label_value(host.name),
            cluster_moid=cluster._moId,
            cluster_name=cluster.name,
            datacenter="DC0",
            vcenter="vcsim",
            observed_at="",
            version=1,
        )
    hosts = {
        host._moId: EsxiHost(
            moid=host._moId,
            name=host.name,
            label=label_value(host.name),
            cluster_moid=cluster._moId,
            cluster_name=cluster.name,
            datacenter="DC0",
            connection_state="connected",
            in_maintenance_mode=False,
            vcenter="vcsim",
        )
        for host in cluster.host
    }
    return placements, hosts


@pytest.fixture
async def world(vcsim: VcsimFactory, tmp_path: Path) -> AsyncIterator[World]:
    vc: Vcsim = vcsim(hosts=3, vms=6)
    si = vc.connect()
    cluster = cluster_of(si)
    hub = FleetHub(tmp_path / "hub")
    install, other = (hub.join(name, name, tmp_path / name) for name in ("me", "other"))
    async with contextlib.AsyncExitStack() as stack:
        await hub.start()
        stack.push_async_callback(hub.close)
        for server in (install, other):
            await server.start()
            stack.push_async_callback(server.stop)
        await hub.provision(lease_max_age_seconds=3.0)
        await eventually(lambda: install.leaf_connected() and other.leaf_connected(), "leaves", 20)
        await install.provision()
        bus: Bus = await stack.enter_async_context(install.connection("drs-translator"))
        theirs_bus: Bus = await stack.enter_async_context(other.connection("drs-translator"))
        session = await stack.enter_async_context(VCenterSession(vc.settings(name="vcsim")))
        drs = await bus.js.key_value(DRS_BUCKET)
        records = OwnershipRecords(drs, "vcsim", ME)
        events: list[Event] = []
        cluster_rules = ClusterRules(session)
        applier = DrsApplier(
            cluster_rules,
            records,
            KeptAnnouncements(drs, "vcsim"),
            events.append,
            DrsMetrics(),
            vcenter="vcsim",
            install=ME,
            event_factory=EventFactory("drs-translator"),
        )
        leases = FleetLeases(HubLeases(bus.nc, HUB_DOMAIN, FLEET_LEASES_BUCKET), ME, ME, wake=_no)
        theirs = FleetLeases(
            HubLeases(theirs_bus.nc, HUB_DOMAIN, FLEET_LEASES_BUCKET),
            "cluster-other",
            "other",
            wake=_no,
        )
        fleet = FleetMembers(ME)
        placements, hosts = topology(si, cluster)
        rules = FleetRules("vcsim", leases, fleet, applier, records, cluster_rules)
        yield World(
            si,
            cluster._moId,
            placements,
            hosts,
            rules,
            leases,
            theirs,
            fleet,
            records,
            events=events,
        )


def _no() -> None:
    return None


async def test_the_holder_adds_edits_by_key_and_removes_then_lets_go(world: World) -> None:
    world.ours("node-1")
    world.elsewhere("node-2")
    await world.cycle()
    assert world.vcenter_vms() == sorted([world.vm("node-1"), world.vm("node-2")])
    assert world.leases.held()
    assert world.records.of(world.cluster)[world.rule].state == "applied"
    key = world.key()
    world.elsewhere("node-2", "node-6")  # the other install's second member
    await world.cycle()
    assert world.vcenter_vms() == sorted(world.vm(n) for n in ("node-1", "node-2", "node-6"))
    assert world.key() == key
    world.elsewhere()  # its members gone: one VM left, no rule wanted
    await world.cycle()
    assert world.vcenter_vms() is None
    assert world.rule not in world.records.of(world.cluster)
    await world.leases.tick()
    assert world.leases.held() == []


async def test_a_rule_another_install_wrote_is_adopted_by_its_key(world: World) -> None:
    world.ours("node-1")
    world.elsewhere("node-2", "node-3")
    vms = [vim.VirtualMachine(world.vm(n), world.si._stub) for n in ("node-2", "node-3")]
    made = _vim.cluster.AntiAffinityRuleSpec(name=world.rule, enabled=True, vm=vms)
    spec = _vim.cluster.ConfigSpecEx(rulesSpec=[_vim.cluster.RuleSpec(operation="add", info=made)])
    reconfigure(world.si, spec)
    key = world.key()
    await world.cycle()
    assert world.vcenter_vms() == sorted(world.vm(n) for n in ("node-1", "node-2", "node-3"))
    assert world.key() == key  # edited in place, never removed and added back
    assert world.rule in world.records.of(world.cluster)


async def test_without_the_lease_nothing_is_written_and_a_kept_record_is_forgotten(
    world: World,
) -> None:
    world.ours("node-1")
    world.elsewhere("node-2")
    await world.cycle()  # this install writes the rule and records it
    assert world.rule in world.records.of(world.cluster)
    key, vms = world.key(), world.vcenter_vms()
    await world.leases.release_all()  # e.g. cut off from the hub long enough
    uuid = world.si.content.about.instanceUuid
    key_on_hub = fleet_lease_key(uuid, world.cluster, world.rule)
    world.theirs.want("vcsim", {key_on_hub: LeaseSubject(uuid, world.cluster, GROUP, world.rule)})
    await world.theirs.tick()
    assert world.theirs.held()
    world.elsewhere("node-2", "node-6")  # the plan changes, but the lease is the other's
    await world.rules.cycle(own_members(world.index), world.placements, world.hosts)
    await world.leases.tick()
    await world.rules.cycle(own_members(world.index), world.placements, world.hosts)
    assert world.leases.held() == []
    assert (world.key(), world.vcenter_vms()) == (key, vms)
    assert world.rule not in world.records.of(world.cluster)


async def test_a_holder_whose_members_left_hands_the_rule_over_untouched(world: World) -> None:
    world.ours("node-1")
    world.elsewhere("node-2", "node-3")
    await world.cycle()
    vms = world.vcenter_vms()
    world.ours()  # this install's member gone; the other's two remain
    await world.cycle()
    await world.leases.tick()
    assert world.vcenter_vms() == vms
    assert world.rule not in world.records.of(world.cluster)
    assert world.leases.held() == []


async def test_more_vms_than_hosts_holds_the_rule_as_it_is_and_says_so(world: World) -> None:
    world.ours("node-1")
    world.elsewhere("node-2")
    await world.cycle()
    vms = world.vcenter_vms()
    world.ours("node-1", "node-3")
    world.elsewhere("node-2", "node-4")  # four VMs, three hosts
    await world.cycle()
    assert world.vcenter_vms() == vms
    conflicts = [e for e in world.events if isinstance(e, DrsRuleConflict)]
    assert [(c.name, c.reason) for c in conflicts] == [(world.rule, "too-few-hosts")]
