"""A fleet group across three Kubernetes clusters' installs on one vCenter, joined by a fleet hub:
one member in each cluster, each install with its own API double, bus (a leaf node of the hub's),
node-labeller, drs-translator and descheduler; the hub's mirror of every install's placements
into every install's fleet view is played by the harness (fleet_harness.py).

- Members placed on different hosts stay there.
- The group's DRS rule, over the three members' VMs, is written by exactly one install: the one
  holding its lease on the hub, the only one with a record of it.
- The owning install is removed: another takes the rule over and edits it to the members left,
  by its key; vCenter, read after every reconfigure and polled throughout, never lacks it.
- A vMotion that piles two clusters' members on one host is repaired by exactly one eviction,
  of the member the tie-break moves, by its own cluster's descheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim

from hostaffinity.affinity.fleet_groups import stayer
from hostaffinity.drs_translator.config import DrsSettings, FleetRuleSettings
from hostaffinity.schema import PodEvicted, fleet_rule_name, parse_drs_name
from tests.e2e.drs_harness import (
    cluster_of,
    drs_config,
    drs_state,
    reading_vcenter_after_every_reconfigure,
    running_translator,
    vm,
)
from tests.e2e.fleet_harness import FleetInstall, FleetViewFiller, fleet_on, member
from tests.e2e.harness import eventually, eventually_async
from tests.e2e.labeller_harness import host_by_name, relocate, stream_events
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

GROUP = "payments-db"
# vcsim puts node-i on host (i-1) mod 4: each cluster has a node on every host.
PLANS = [
    ("east", [f"node-{i}" for i in range(1, 5)], "prod-east"),
    ("west", [f"node-{i}" for i in range(5, 9)], "prod-west"),
    ("north", [f"node-{i}" for i in range(9, 13)], "prod-north"),
]
# One member each, put on three different hosts first (the fourth left free).
MEMBERS = {
    "east": ("db-east", "node-1"),
    "west": ("db-west", "node-6"),
    "north": ("db-north", "node-11"),
}


def rule_vms(si: vim.ServiceInstance, rule: str) -> list[str]:
    return sorted(fleet_rules(si).get(rule, {}).get("vm", []))


def fleet_rules(si: vim.ServiceInstance) -> dict[str, dict[str, Any]]:
    return {
        fields["name"]: fields
        for fields in drs_state(si).values()
        if (parsed := parse_drs_name(fields["name"])) is not None and parsed.fleet
    }


async def owners(fleet: list[FleetInstall]) -> list[str]:
    """The installs holding a record of the group's fleet rule."""
    return [f.name for f in fleet if (await f.fleet_records())]


@contextlib.asynccontextmanager
async def polling_vcenter(si: vim.ServiceInstance, name: str) -> AsyncIterator[list[bool]]:
    """Whether vCenter held the rule `name`, read every 20 ms in the block."""
    seen: list[bool] = []

    async def poll() -> None:
        while True:
            seen.append(name in await asyncio.to_thread(fleet_rules, si))
            await asyncio.sleep(0.02)

    task = asyncio.create_task(poll())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_fleet_group_across_three_clusters(
    vcsim: VcsimFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vc = vcsim(hosts=4, vms=12)
    si = vc.connect()
    cluster = cluster_of(si)._moId
    rule = fleet_rule_name(cluster, GROUP)
    hosts = sorted(h.name for h in cluster_of(si).host)
    for index, (_, node) in enumerate(MEMBERS.values()):  # apart, whatever vcsim's placement
        relocate(si, node, hosts[index])
    async with fleet_on(vc, tmp_path, PLANS) as (hub, fleet):
        by_name = {f.name: f for f in fleet}
        for name, (pod, node) in MEMBERS.items():
            by_name[name].install.kube.seed(member(pod, node, GROUP))
        filler = FleetViewFiller(fleet, si.content.about.instanceUuid)
        filling = asyncio.create_task(filler.run())
        try:
            member_vms = {name: vm(si, node) for name, (_, node) in MEMBERS.items()}

            # One rule over the three members' VMs, written by one install: the lease holder.
            everyone = sorted(member_vms.values())
            await eventually(lambda: rule_vms(si, rule) == everyone, "the rule over all three", 40)
            await eventually_async(lambda: _one_owner(fleet), "one install recording it", 20)
            (owner,) = await owners(fleet)
            holders = await hub.lease_holders()
            assert list(holders.values()) == [by_name[owner].install.cluster_identity]
            key = fleet_rules(si)[rule]["key"]

            # Placed on different hosts, they stay: each descheduler decided, and moved nothing.
            await asyncio.sleep(2.0)
            for f in fleet:
                assert f.terminating() == []
                loop = f.descheduler.loop if f.descheduler else None
                assert loop is not None
                assert loop.last is not None
                assert loop.last.plan.actions == [], f"{f.name} moved: {loop.last.plan.actions}"

            # The owner removed: another install takes the rule over, never a moment without it.
            async with (
                reading_vcenter_after_every_reconfigure(si, monkeypatch) as states,
                polling_vcenter(si, rule) as polled,
            ):
                filler.removed.add(owner)
                await by_name[owner].remove()
                left = [name for name in MEMBERS if name != owner]
                kept = sorted(member_vms[n] for n in left)
                await eventually(lambda: rule_vms(si, rule) == kept, "the rule edited", 30)
                remaining = [f for f in fleet if f.name != owner]
                await eventually_async(
                    lambda: _one_owner(remaining), "one remaining install recording it", 20
                )
            assert states, "the new owner edited the rule"
            assert all(rule in {v["name"] for v in s.values()} for s in states)
            assert polled
            assert all(polled), (
                f"the rule was missing in {polled.count(False)} of {len(polled)} reads"
            )
            assert fleet_rules(si)[rule]["key"] == key  # edited in place, never re-created
            (new_owner,) = await owners(remaining)
            assert new_owner != owner
            holders = await hub.lease_holders()
            assert list(holders.values()) == [by_name[new_owner].install.cluster_identity]

            # A vMotion piles the two members left on one host: exactly one is evicted.
            mover_name, target_name = left
            target_host = host_by_name(si, _host_of(si, MEMBERS[target_name][1]))
            relocate(si, MEMBERS[mover_name][1], target_host.name)
            stays = stayer(
                GROUP,
                [(by_name[n].install.cluster_identity, f"default/{MEMBERS[n][0]}") for n in left],
            )
            moving = next(n for n in left if by_name[n].install.cluster_identity != stays[0])
            await eventually(
                lambda: by_name[moving].terminating() == [MEMBERS[moving][0]],
                "the member the tie-break moves, evicted",
                20,
            )
            await asyncio.sleep(2.0)  # cycles enough for a second eviction, were there one
            assert {n: by_name[n].terminating() for n in left} == {
                n: [MEMBERS[n][0]] if n == moving else [] for n in left
            }
            evicted = []
            for name in left:
                bus = by_name[name].install.bus
                assert bus is not None
                evicted += [
                    (name, e.pod)
                    for e in await stream_events(bus)
                    if isinstance(e, PodEvicted) and e.result == "evicted"  # not its intent
                ]
            assert evicted == [(moving, f"default/{MEMBERS[moving][0]}")]
        finally:
            filling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await filling


async def _one_owner(fleet: list[FleetInstall]) -> bool:
    return len(await owners(fleet)) == 1


def _host_of(si: vim.ServiceInstance, node: str) -> str:
    (found,) = [v for v in cluster_of(si).resourcePool.vm if v.name == node]
    return str(found.runtime.host.name)


async def test_a_dry_run_takes_no_lease(
    vcsim: VcsimFactory, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """A drs-translator in dry run would otherwise hold the fleet's rules it never writes."""
    vc = vcsim(hosts=3, vms=3)
    hub = FleetRuleSettings(hub_domain="hub")
    dry = drs_config(vc, nats_server, kubeconfig, drs=DrsSettings(dry_run=True), fleet=hub)
    async with running_translator(dry) as running:
        assert running.work.fleet_leases is None
    async with running_translator(drs_config(vc, nats_server, kubeconfig, fleet=hub)) as running:
        assert running.work.fleet_leases is not None
