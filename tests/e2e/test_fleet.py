"""The fleet end to end, on the real machinery: three Kubernetes clusters (three API doubles) on
one vCenter (vcsim, four ESXi hosts, each cluster a node on every host), each with its own
hostaffinity on its own shipped three-server bus, the three buses leaf nodes of the shipped
three-server fleet hub; the hub sources every install's placement summary and topology and each
install mirrors the view back (tests/e2e/fleet_harness.py). A fleet group `payments-db` has one
member in each cluster.

- Members placed on different hosts stay there; the group's DRS rule is written by exactly one
  install, the holder of its lease on the hub; `fleet what-if host-failure` names every
  cluster's losses; no install's events reach another's stream.
- The owning install is removed (its services stopped, `fleet leave`, `fleet provision`):
  another takes the rule over and edits it to the members left, vCenter read after every
  reconfigure and polled throughout never lacking it.
- A vMotion of one cluster's node onto another cluster's member's host: the member the
  tie-break moves is evicted by its own descheduler, which learnt of the move only through the
  hub; exactly one `pod.evicted` with result `evicted` in the fleet.
- The hub killed, or one install's leaf link cut: every install cut off labels, admits (a pod
  created through its API gets the fleet terms from its mirror) and deschedules alone; the
  others go on through the hub. When the hub or the link comes back the view converges: every
  revision an install still holds sourced once, in order, and every mirror equal to the hub's
  view.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError
from pyVmomi import vim

from hostaffinity.affinity.fleet_groups import stayer
from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    PLACEMENTS_BUCKET,
    TOPOLOGY_BUCKET,
    PodEvicted,
    fleet_key,
    fleet_lease_key,
    fleet_rule_name,
    label_value,
    parse_drs_name,
)
from tests.e2e.descheduler_harness import pod_object
from tests.e2e.drs_harness import (
    cluster_of,
    drs_config,
    drs_state,
    reading_vcenter_after_every_reconfigure,
    running_translator,
    vm,
)
from tests.e2e.fleet_harness import FleetInstall, events_of_others, fleet_on, member
from tests.e2e.harness import eventually, eventually_async
from tests.e2e.labeller_harness import node_labels, relocate, vm_by_name
from tests.platform.console import exit_code
from tests.platform.fleet_hub import FleetHub, held, lease_holder, once_each, sourced, view
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

GROUP = "payments-db"
# vcsim puts node-i on host (i-1) mod 4: each cluster has a node on every host.
PLANS = [
    ("east", [f"node-{i}" for i in range(1, 5)]),
    ("west", [f"node-{i}" for i in range(5, 9)]),
    ("north", [f"node-{i}" for i in range(9, 13)]),
]
# One member each, on three different hosts (the fourth left free).
MEMBERS = {
    "east": ("db-east", "node-1"),
    "west": ("db-west", "node-6"),
    "north": ("db-north", "node-11"),
}
# `web` in each cluster: two replicas kept off each other's host, on two nodes without a member.
WEB_NODES = {
    "east": ("node-2", "node-3"),
    "west": ("node-5", "node-7"),
    "north": ("node-9", "node-10"),
}
APART = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": LABEL_ESXI_HOST}
        ]
    }
}
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def seeded() -> dict[str, list[dict[str, Any]]]:
    """Each install's pods at the start: its member of the group and web's two replicas."""
    pods: dict[str, list[dict[str, Any]]] = {}
    for name, (pod, node) in MEMBERS.items():
        web = [pod_object(f"web-{i}", "web", n, owner="web-rs", affinity=APART)
               for i, n in enumerate(WEB_NODES[name])]  # fmt: skip
        pods[name] = [member(pod, node, GROUP), *web]
    return pods


def host_of(si: vim.ServiceInstance, node: str) -> str:
    return str(vm_by_name(si, node).runtime.host.name)


def apart(si: vim.ServiceInstance) -> None:
    """The members on three different hosts, whatever vcsim's placement."""
    hosts = sorted(h.name for h in cluster_of(si).host)
    for index, (_, node) in enumerate(MEMBERS.values()):
        relocate(si, node, hosts[index])


def fleet_rules(si: vim.ServiceInstance) -> dict[str, dict[str, Any]]:
    return {
        fields["name"]: fields
        for fields in drs_state(si).values()
        if (parsed := parse_drs_name(fields["name"])) is not None and parsed.fleet
    }


def rule_vms(si: vim.ServiceInstance, rule: str) -> list[str]:
    return sorted(fleet_rules(si).get(rule, {}).get("vm", []))


async def owners(fleet: Sequence[FleetInstall]) -> list[str]:
    """The installs holding a record of a fleet rule."""
    return [f.name for f in fleet if await f.fleet_records()]


async def one_owner(fleet: Sequence[FleetInstall]) -> bool:
    return len(await owners(fleet)) == 1


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


async def all_placed(fleet: Sequence[FleetInstall], si: vim.ServiceInstance) -> None:
    """Until every install's mirror places every member where vCenter has it."""
    truth = {name: host_of(si, node) for name, (_, node) in MEMBERS.items()}

    async def placed() -> bool:
        return all([await install.members(GROUP) == truth for install in fleet])

    await eventually_async(placed, "every mirror placing every member", 90)


async def evictions(fleet: Sequence[FleetInstall]) -> list[tuple[str, str]]:
    """Every eviction made in the fleet (`pod.evicted` with result `evicted`, not the intent
    `requested` stored before it), as (install, pod name): every pod here is in `default`."""
    return [
        (install.name, event.pod.removeprefix("default/"))
        for install in fleet
        for event in await install.events()
        if isinstance(event, PodEvicted) and event.result == "evicted"
    ]


async def admits_alone(install: FleetInstall, si: vim.ServiceInstance) -> None:
    """A member created through the install's API gets preferred node affinity away from the
    hosts of the other clusters' members (from its own mirror), then goes."""
    pod = member(f"db-{install.name}-new", "", GROUP)
    stored = await install.create(pod)
    away = {
        label_value(host_of(si, node))
        for name, (_, node) in MEMBERS.items()
        if name != install.name
    }
    terms = stored["spec"]["affinity"]["nodeAffinity"][PREFERRED]
    expressions = [e for t in terms for e in t["preference"]["matchExpressions"]]
    assert {"key": LABEL_ESXI_HOST, "operator": "NotIn", "values": sorted(away)} in expressions, (
        install.name,
        terms,
    )
    install.kube.delete("v1", "pods", pod["metadata"]["name"], "default")


async def works_alone(install: FleetInstall, si: vim.ServiceInstance) -> None:
    """A vMotion piles web's replicas: the install labels the node, admits a pod and evicts
    one of the two, all on its own."""
    first, second = WEB_NODES[install.name]
    target = host_of(si, first)
    await asyncio.to_thread(relocate, si, second, target)
    await eventually(
        lambda: node_labels(install.kube, second).get(LABEL_ESXI_HOST) == label_value(target),
        f"{install.name} relabelling {second}",
        30,
    )
    await admits_alone(install, si)
    await eventually(
        lambda: [p for p in install.terminating() if p.startswith("web-")] != [],
        f"{install.name}'s descheduler spreading web",
        30,
    )
    assert len([p for p in install.terminating() if p.startswith("web-")]) == 1


async def converged(hub: FleetHub, fleet: Sequence[FleetInstall]) -> None:
    """The view converged: the hub holds every install's placements and topology as the install
    does (each revision it still holds sourced once, in order), and every mirror equals it."""

    async def same() -> bool:
        try:
            return await matching()
        except (NatsTimeoutError, NoRespondersError, ServiceUnavailableError):
            return False  # the hub just started: a stream without its leader yet, not converged

    async def matching() -> bool:
        async with hub.connection() as hub_bus:
            on_hub = await view(hub_bus)
            for install in fleet:
                async with install.bus.connection("cli") as bus:
                    own = {
                        fleet_key(install.name, key): value
                        for bucket in (PLACEMENTS_BUCKET, TOPOLOGY_BUCKET)
                        for key, value in (
                            await live_entries(await bus.js.key_value(bucket))
                        ).items()
                    }
                    theirs = {k: v for k, v in on_hub.items() if k.startswith(f"{install.name}.")}
                    if own != theirs or await view(bus) != on_hub:
                        return False
        return True

    await eventually_async(same, "the view converging on the hub and in every mirror", 90)
    async with hub.connection() as hub_bus:
        for install in fleet:
            async with install.bus.connection("cli") as bus:
                for bucket in (PLACEMENTS_BUCKET, TOPOLOGY_BUCKET):
                    stream = f"KV_{bucket}"
                    once_each(await sourced(hub_bus, install.name, stream), await held(bus, stream))


async def test_a_fleet_group_across_three_clusters_on_one_hub(
    vcsim: VcsimFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    vc = vcsim(hosts=4, vms=12)
    si = vc.connect()
    cluster = cluster_of(si)._moId
    rule = fleet_rule_name(cluster, GROUP)
    lease = fleet_lease_key(si.content.about.instanceUuid, cluster, rule)
    apart(si)
    async with fleet_on(vc, tmp_path, PLANS, pods=seeded()) as (hub, fleet):
        by_name = {f.name: f for f in fleet}
        member_vms = {name: vm(si, node) for name, (_, node) in MEMBERS.items()}
        await all_placed(fleet, si)

        # One rule over the three members' VMs, written by one install: the lease holder.
        everyone = sorted(member_vms.values())
        await eventually(lambda: rule_vms(si, rule) == everyone, "the rule over all three", 60)
        await eventually_async(lambda: one_owner(fleet), "one install recording it", 30)
        (owner,) = await owners(fleet)
        assert await lease_holder(by_name[owner].bus, lease) == owner
        key = fleet_rules(si)[rule]["key"]

        # Placed on different hosts, they stay: each descheduler decided, and moved nothing.
        await asyncio.sleep(2.0)
        for install in fleet:
            assert install.terminating() == []
            loop = install.descheduler.loop if install.descheduler else None
            assert loop is not None
            assert loop.last is not None
            assert loop.last.plan.actions == [], f"{install.name}: {loop.last.plan.actions}"

        # What a failure of east's member's host costs every cluster, from east's mirror.
        failing = host_of(si, MEMBERS["east"][1])
        settings = by_name["east"].bus.settings("cli")
        argv = [
            "fleet", "what-if", "host-failure", failing, "--nats", settings.servers[0],
            "--nats-seed", str(settings.nkey_seed_file),
            "--nats-ca-file", str(settings.tls_ca_file),
        ]  # fmt: skip
        capsys.readouterr()
        assert await asyncio.to_thread(exit_code, argv) == 0
        printed = capsys.readouterr().out
        assert ": 3 clusters affected" in printed, printed
        for name, nodes in PLANS:
            there = [n for n in nodes if host_of(si, n) == failing]
            assert f"{name}: {len(there)} nodes lost: {', '.join(there)}" in printed, printed
        assert printed.count(f"fleet groups hit: {GROUP}") == 1  # east's member alone is there

        # Each install's events stay its own: the leaf links carry none across.
        assert await events_of_others(fleet) == {name: [] for name, _ in PLANS}

        # The owner removed (its services stopped, then it leaves the fleet on the hub): another
        # install takes the rule over and edits it to the members left, never a moment without.
        async with (
            reading_vcenter_after_every_reconfigure(si, monkeypatch) as states,
            polling_vcenter(si, rule) as polled,
        ):
            await by_name[owner].remove()
            hub.folder.leave(owner)
            hub.reload()
            await hub.provision(lease_max_age_seconds=3.0)
            left = [name for name in MEMBERS if name != owner]
            remaining = [f for f in fleet if f.name != owner]
            kept = sorted(member_vms[n] for n in left)
            await eventually(lambda: rule_vms(si, rule) == kept, "the rule edited", 60)
            await eventually_async(lambda: one_owner(remaining), "one install recording it", 30)
        assert states, "the new owner edited the rule"
        assert all(rule in {v["name"] for v in s.values()} for s in states)
        assert polled
        assert all(polled), f"the rule was missing in {polled.count(False)} of {len(polled)} reads"
        assert fleet_rules(si)[rule]["key"] == key  # edited in place, never re-created
        (new_owner,) = await owners(remaining)
        assert new_owner != owner
        assert await lease_holder(by_name[new_owner].bus, lease) == new_owner

        # The staying member's node is moved onto the other's host: the member the tie-break
        # moves is evicted by its own descheduler, which learns of it through the hub alone.
        identities = [(n, f"default/{MEMBERS[n][0]}") for n in left]
        stays = stayer(GROUP, identities)[0]
        moving = next(n for n in left if n != stays)
        target = host_of(si, MEMBERS[moving][1])
        await asyncio.to_thread(relocate, si, MEMBERS[stays][1], target)
        await eventually(
            lambda: by_name[moving].terminating() == [MEMBERS[moving][0]],
            "the member the tie-break moves, evicted",
            60,
        )
        await asyncio.sleep(2.0)  # cycles enough for a second eviction, were there one
        assert {n: by_name[n].terminating() for n in left} == {
            n: [MEMBERS[n][0]] if n == moving else [] for n in left
        }
        assert await evictions(remaining) == [(moving, MEMBERS[moving][0])]


async def test_the_hub_killed_every_install_works_alone_and_the_view_converges(
    vcsim: VcsimFactory, tmp_path: Path
) -> None:
    vc = vcsim(hosts=4, vms=12)
    si = vc.connect()
    apart(si)
    async with fleet_on(vc, tmp_path, PLANS, pods=seeded()) as (hub, fleet):
        await all_placed(fleet, si)
        for server in hub.servers:
            await server.kill()
        for install in fleet:
            await works_alone(install, si)
        # Without the hub, every mirror still has the members where they were.
        await all_placed(fleet, si)
        await hub.start()
        await converged(hub, fleet)
        assert await events_of_others(fleet) == {name: [] for name, _ in PLANS}


async def test_a_cut_link_leaves_one_install_alone_while_the_others_go_on(
    vcsim: VcsimFactory, tmp_path: Path
) -> None:
    vc = vcsim(hosts=4, vms=12)
    si = vc.connect()
    apart(si)
    async with fleet_on(vc, tmp_path, PLANS, cuttable="north", pods=seeded()) as (hub, fleet):
        by_name = {f.name: f for f in fleet}
        await all_placed(fleet, si)
        await hub.links["north"].cut()
        await works_alone(by_name["north"], si)

        # east and west go on through the hub: a pile of their members is repaired by one
        # eviction, north's mirror never hears of it.
        pair = ["east", "west"]
        stays = stayer(GROUP, [(n, f"default/{MEMBERS[n][0]}") for n in pair])[0]
        moving = next(n for n in pair if n != stays)
        before = host_of(si, MEMBERS[stays][1])
        await asyncio.to_thread(relocate, si, MEMBERS[stays][1], host_of(si, MEMBERS[moving][1]))
        await eventually(
            lambda: by_name[moving].terminating() == [MEMBERS[moving][0]],
            "the member the tie-break moves, evicted through the hub",
            60,
        )
        assert await evictions(fleet) == [(moving, MEMBERS[moving][0])] + [
            ("north", p) for p in by_name["north"].terminating()
        ]
        assert (await by_name["north"].members(GROUP))[stays] == before

        await hub.links["north"].restore()
        await converged(hub, fleet)
        assert await events_of_others(fleet) == {name: [] for name, _ in PLANS}


async def test_a_dry_run_takes_no_lease_and_an_install_outside_a_fleet_none_either(
    vcsim: VcsimFactory, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """A drs-translator in dry run would otherwise hold the fleet's rules it never writes; one
    whose install joined no fleet has no hub to ask."""
    vc = vcsim(hosts=3, vms=3)
    in_fleet = msgspec.structs.replace(nats_server.settings(), fleet_install="east")
    dry = drs_config(vc, nats_server, kubeconfig, drs=DrsSettings(dry_run=True), nats=in_fleet)
    async with running_translator(dry) as running:
        assert running.work.fleet_leases is None
    async with running_translator(drs_config(vc, nats_server, kubeconfig)) as running:
        assert running.work.fleet_leases is None
    async with running_translator(
        drs_config(vc, nats_server, kubeconfig, nats=in_fleet)
    ) as running:
        assert running.work.fleet_leases is not None
