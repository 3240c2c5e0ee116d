"""drs-translator end to end: vcsim (3 hosts, 6 node VMs), a real nats-server, the Kubernetes
double and the real node-labeller providing the placements.

vcsim puts VM i on host i mod 3, so node1/node4 share DC0_C0_H0, node2/node5 H1, node3/node6 H2.
"""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from pyVmomi import vim

from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.drs_translator.main import service_spec
from hostaffinity.drs_translator.service import DrsTranslatorWork
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.runtime.runner import running_service
from hostaffinity.schema import (
    DrsRuleConflict,
    DrsRuleDrift,
    DrsRulesApplied,
    TopologyEvent,
)
from tests.e2e.drs_harness import (
    RunningTranslator,
    anti_rules,
    cluster_of,
    cycles_after,
    drs_config,
    drs_state,
    foreign,
    pod_manifest,
    reconfigure,
    records,
    running_translator,
    stray_name,
    vm,
)
from tests.e2e.harness import bus_rebuilt_with, default_events
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_object,
    running,
    session_keys,
    stream_events,
    vm_by_name,
    wait_ready,
)
from tests.platform.bus_values import ESXI_HOST, OTHER_HOST
from tests.platform.bus_values import node_placement as placement
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.tcp_proxy import TcpProxy
from tests.platform.vcsim import Vcsim, VcsimFactory

NODES = [f"node{i}" for i in range(1, 7)]
WEB = {"app": "web"}
_vim: Any = vim


@pytest.fixture
def vc(vcsim: VcsimFactory, kube_double: KubeDouble) -> Vcsim:
    started = vcsim(hosts=3, vm_names=NODES)
    for name in NODES:
        kube_double.seed(node_object(name))
    return started


@contextlib.asynccontextmanager
async def labeller(vc: Vcsim, nats: NatsServer, kubeconfig: Path) -> AsyncIterator[None]:
    async with running(labeller_config(vc, nats, kubeconfig)) as service:
        await wait_ready(service)
        yield


def admin_objects(si: vim.ServiceInstance, stray: str) -> None:
    """What an administrator made before hostaffinity started: never to be touched (`stray`
    named as this install names its rules)."""
    vms = lambda *nodes: [vm_by_name(si, n) for n in nodes]  # noqa: E731
    host = next(h for h in cluster_of(si).host if h.name == "DC0_C0_H1")
    spec = _vim.cluster.ConfigSpecEx(
        rulesSpec=[
            _vim.cluster.RuleSpec(
                operation="add",
                info=_vim.cluster.AntiAffinityRuleSpec(
                    name="admin-keep-db-apart", enabled=True, vm=vms("node2", "node4")
                ),
            ),
            _vim.cluster.RuleSpec(
                operation="add",
                info=_vim.cluster.AntiAffinityRuleSpec(
                    name=stray, enabled=True, vm=vms("node2", "node6")
                ),
            ),
            _vim.cluster.RuleSpec(
                operation="add",
                info=_vim.cluster.VmHostRuleInfo(
                    name="admin-db-on-h1",
                    enabled=True,
                    mandatory=False,
                    vmGroupName="admin-db-vms",
                    affineHostGroupName="admin-h1",
                ),
            ),
        ],
        groupSpec=[
            _vim.cluster.GroupSpec(
                operation="add", info=_vim.cluster.VmGroup(name="admin-db-vms", vm=vms("node2"))
            ),
            _vim.cluster.GroupSpec(
                operation="add", info=_vim.cluster.HostGroup(name="admin-h1", host=[host])
            ),
        ],
    )
    reconfigure(si, spec)


async def events_of(bus: Bus, kind: type[TopologyEvent]) -> list[Any]:
    return [e for e in await stream_events(bus) if isinstance(e, kind)]


async def conflict_events(kube: KubeDouble) -> list[dict[str, Any]]:
    return [e for e in await default_events(kube) if e["reason"] == "DrsRuleConflict"]


async def settle(check: Callable[[], bool], what: str, within: float = 10.0) -> float:
    """Seconds until `check` held."""
    started = time.monotonic()
    await eventually(check, what, within)
    return time.monotonic() - started


async def calls(running: RunningTranslator, since: dict[str, int]) -> dict[str, int]:
    """vCenter calls since `since`, once the translator is done with what it was given."""
    await eventually(running.translator.idle, "translator idle")
    return {k: v - since.get(k, 0) for k, v in running.calls.items() if v - since.get(k, 0)}


async def test_one_rule_follows_the_replicas_and_foreign_rules_stay_identical(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus
) -> None:
    si = vc.connect()
    vm1, vm3, vm5 = vm(si, "node1"), vm(si, "node3"), vm(si, "node5")
    stray = stray_name(kube_double)
    admin_objects(si, stray)
    before = foreign(drs_state(si))
    assert len(before) == 5
    config = drs_config(vc, nats_server, kubeconfig)
    calls_per_step: dict[str, dict[str, int]] = {}
    async with labeller(vc, nats_server, kubeconfig):
        async with running_translator(config) as drs:
            calls_per_step["start"] = dict(drs.calls)
            mark = dict(drs.calls)
            kube_double.seed(pod_manifest("p1", "node1", WEB, apart_from=WEB))
            kube_double.seed(pod_manifest("p2", "node3", WEB, apart_from=WEB))
            took = await settle(
                lambda: list(anti_rules(si).values()) == [sorted([vm1, vm3])],
                "rule {vm1, vm3}",
                within=2.0,
            )
            print(f"p1+p2 -> rule in {took:.3f} s")
            (name,) = anti_rules(si)
            calls_per_step["p1+p2"] = await calls(drs, mark)
            assert foreign(drs_state(si)) == before

            mark = dict(drs.calls)
            kube_double.seed(pod_manifest("p3", "node5", WEB, apart_from=WEB))
            await settle(lambda: anti_rules(si) == {name: sorted([vm1, vm3, vm5])}, "+vm5")
            calls_per_step["p3"] = await calls(drs, mark)
            assert calls_per_step["p3"]["ReconfigureComputeResource_Task"] == 1
            assert foreign(drs_state(si)) == before

            mark = dict(drs.calls)
            kube_double.delete("v1", "pods", "p2", "default")
            await settle(lambda: anti_rules(si) == {name: sorted([vm1, vm5])}, "-vm3")
            calls_per_step["-p2"] = await calls(drs, mark)
            assert foreign(drs_state(si)) == before
            (record,) = (await records(bus)).values()
            assert (record.name, record.vms, record.state) == (name, sorted([vm1, vm5]), "applied")
            assert record.pods == ["default/p1", "default/p3"]

            mark = dict(drs.calls)
            drs.translator.resync()
            calls_per_step["resync"] = await calls(drs, mark)
            assert anti_rules(si) == {name: sorted([vm1, vm5])}
            assert foreign(drs_state(si)) == before

        async with running_translator(config) as drs:  # a restart
            calls_per_step["restart"] = dict(drs.calls)
            assert anti_rules(si) == {name: sorted([vm1, vm5])}
            assert foreign(drs_state(si)) == before
            assert calls_per_step["restart"].get("ReconfigureComputeResource_Task", 0) == 0

            mark = dict(drs.calls)
            kube_double.delete("v1", "pods", "p1", "default")
            kube_double.delete("v1", "pods", "p3", "default")
            await settle(lambda: anti_rules(si) == {}, "rule removed")
            calls_per_step["all deleted"] = await calls(drs, mark)
            await eventually(lambda: drs.translator.cycles > 0, "cycle")
            assert await records(bus) == {}
            assert foreign(drs_state(si)) == before

    applied = await events_of(bus, DrsRulesApplied)
    assert [(e.added, e.edited, e.removed) for e in applied] == [
        ([name], [], []),
        ([], [name], []),
        ([], [name], []),
        ([], [], [name]),
    ]
    stray_reports = [e for e in await events_of(bus, DrsRuleConflict) if e.name == stray]
    assert [e.reason for e in stray_reports] == ["prefix-without-record"]
    print("vCenter calls per step:", json.dumps(calls_per_step, sort_keys=True))


async def test_a_workload_arriving_on_a_rule_s_vms_keeps_the_rule_and_reconfigures_nothing(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus
) -> None:
    """Two workloads spread over the same node VMs are one rule. The one arriving second has
    the smaller key ("api" < "web"): the rule keeps its name, vCenter is not reconfigured, and
    its record now names both workloads' pods (what `explain pod` reads)."""
    si = vc.connect()
    expected = sorted([vm(si, "node1"), vm(si, "node3")])
    api = {"app": "api"}
    config = drs_config(vc, nats_server, kubeconfig)
    async with labeller(vc, nats_server, kubeconfig), running_translator(config) as drs:
        kube_double.seed(pod_manifest("web-1", "node1", WEB, apart_from=WEB))
        kube_double.seed(pod_manifest("web-2", "node3", WEB, apart_from=WEB))
        await settle(lambda: list(anti_rules(si).values()) == [expected], "the web rule")
        (name,) = anti_rules(si)
        mark = dict(drs.calls)
        kube_double.seed(pod_manifest("api-1", "node1", api, apart_from=api))
        kube_double.seed(pod_manifest("api-2", "node3", api, apart_from=api))
        await eventually(lambda: len(drs.translator.pods) == 4, "the api pods seen")

        async def record_names_both() -> bool:
            return [r.pods for r in (await records(bus)).values()] == [
                ["default/api-1", "default/api-2", "default/web-1", "default/web-2"]
            ]

        deadline = time.monotonic() + 10
        while not await record_names_both():
            assert time.monotonic() < deadline, await records(bus)
            await asyncio.sleep(0.05)
        assert anti_rules(si) == {name: expected}
        assert "ReconfigureComputeResource_Task" not in await calls(drs, mark)
    applied = await events_of(bus, DrsRulesApplied)
    assert [(e.added, e.removed) for e in applied] == [([name], [])]


async def test_a_rule_of_ours_changed_by_hand_is_repaired_at_the_resync_with_drift_events(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus
) -> None:
    si = vc.connect()
    expected = sorted([vm(si, "node1"), vm(si, "node3")])
    kube_double.seed(pod_manifest("p1", "node1", WEB, apart_from=WEB))
    kube_double.seed(pod_manifest("p2", "node3", WEB, apart_from=WEB))
    async with labeller(vc, nats_server, kubeconfig):
        config = drs_config(vc, nats_server, kubeconfig, drs=DrsSettings(resync_seconds=1.0))
        async with running_translator(config) as drs:
            await settle(lambda: list(anti_rules(si).values()) == [expected], "rule")
            (name,) = anti_rules(si)
            (rule,) = [r for r in cluster_of(si).configurationEx.rule if r.name == name]
            mark = dict(drs.calls)
            reconfigure(
                si,
                _vim.cluster.ConfigSpecEx(
                    rulesSpec=[_vim.cluster.RuleSpec(operation="remove", removeKey=rule.key)]
                ),
            )
            assert anti_rules(si) == {}
            await settle(lambda: anti_rules(si) == {name: expected}, "rule repaired", 10)
            print("vCenter calls, hand deletion to repair:", await calls(drs, mark))

            (rule,) = [r for r in cluster_of(si).configurationEx.rule if r.name == name]
            rule.vm = [vm_by_name(si, "node1"), vm_by_name(si, "node5")]  # an edit by hand
            reconfigure(
                si,
                _vim.cluster.ConfigSpecEx(
                    rulesSpec=[_vim.cluster.RuleSpec(operation="edit", info=rule)]
                ),
            )
            assert anti_rules(si) != {name: expected}
            await settle(lambda: anti_rules(si) == {name: expected}, "edit undone", 10)
    drift = await events_of(bus, DrsRuleDrift)
    assert [(e.name, e.change, e.expected_vms, e.found_vms) for e in drift] == [
        (name, "deleted", expected, []),
        (name, "edited", expected, sorted([vm(si, "node1"), vm(si, "node5")])),
    ]


async def test_conflicts_are_reported_and_nothing_is_sent(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus
) -> None:
    si = vc.connect()
    async with (
        labeller(vc, nats_server, kubeconfig),
        running_translator(drs_config(vc, nats_server, kubeconfig)) as drs,
    ):
        mark = dict(drs.calls)
        for i in range(1, 5):  # 4 anti-affine replicas on 4 VMs, 3 hosts
            kube_double.seed(pod_manifest(f"r{i}", f"node{i}", WEB, apart_from=WEB))
        kube_double.seed(pod_manifest("a", "node5", {"app": "a"}, apart_from={"app": "b"}))
        kube_double.seed(pod_manifest("b", "node6", {"app": "b"}, near={"app": "a"}))
        await eventually(lambda: len(drs.translator.pods) == 6, "pods seen")
        spent = await calls(drs, mark)
        print("vCenter calls with only conflicts:", spent)
        assert "ReconfigureComputeResource_Task" not in spent
        assert drs_state(si) == {}
        conflicts = await events_of(bus, DrsRuleConflict)
        assert sorted(e.reason for e in conflicts) == [
            "together-and-apart",
            "together-and-apart",
            "too-few-hosts",
        ]
        too_many = next(e for e in conflicts if e.reason == "too-few-hosts")
        assert too_many.pods == [f"default/r{i}" for i in range(1, 5)]
        events = await conflict_events(kube_double)
        assert {e["involvedObject"]["name"] for e in events} == {
            "a",
            "b",
            "r1",
            "r2",
            "r3",
            "r4",
        }
        kube_double.delete("v1", "pods", "r4", "default")  # still working: 3 fit on 3 hosts
        await settle(lambda: len(drs_state(si)) == 1, "rule for three replicas")


async def test_node_affinity_on_a_host_becomes_groups_and_a_should_rule(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    si = vc.connect()
    host = next(h for h in cluster_of(si).host if h.name == "DC0_C0_H1")
    async with (
        labeller(vc, nats_server, kubeconfig),
        running_translator(drs_config(vc, nats_server, kubeconfig)) as drs,
    ):
        kube_double.seed(pod_manifest("pinned", "node2", {"app": "db"}, on_hosts=["DC0_C0_H1"]))
        await settle(lambda: len(drs_state(si)) == 3, "VM group, host group, VM-Host rule")
        by_type = {v["_type"]: v for v in drs_state(si).values()}
        vm_group = by_type["vim.cluster.VmGroup"]
        host_group = by_type["vim.cluster.HostGroup"]
        rule = by_type["vim.cluster.VmHostRuleInfo"]
        assert vm_group["vm"] == [vm(si, "node2")]
        assert host_group["host"] == [host._moId]
        assert (rule["vmGroupName"], rule["affineHostGroupName"], rule["mandatory"]) == (
            vm_group["name"],
            host_group["name"],
            False,
        )
        mark = dict(drs.calls)
        kube_double.delete("v1", "pods", "pinned", "default")
        await settle(lambda: drs_state(si) == {}, "all three removed")
        assert (await calls(drs, mark))["ReconfigureComputeResource_Task"] == 1


async def test_must_rules_onto_hosts_with_none_in_common_are_held_and_reported(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, bus: Bus
) -> None:
    si = vc.connect()
    config = drs_config(vc, nats_server, kubeconfig, drs=DrsSettings(vm_host_mandatory=True))
    async with labeller(vc, nats_server, kubeconfig), running_translator(config) as drs:
        mark = dict(drs.calls)
        # Both run on node2 (node affinity is IgnoredDuringExecution: its VM moved since).
        kube_double.seed(pod_manifest("db", "node2", {"app": "db"}, on_hosts=["DC0_C0_H1"]))
        kube_double.seed(pod_manifest("cache", "node2", {"app": "c"}, on_hosts=["DC0_C0_H2"]))
        await eventually(lambda: len(drs.translator.pods) == 2, "pods seen")
        assert "ReconfigureComputeResource_Task" not in await calls(drs, mark)
        assert drs_state(si) == {}
        conflicts = await events_of(bus, DrsRuleConflict)
        assert sorted((e.reason, tuple(e.vms), tuple(e.pods)) for e in conflicts) == [
            ("no-common-host", (vm(si, "node2"),), ("default/cache",)),
            ("no-common-host", (vm(si, "node2"),), ("default/db",)),
        ]
        events = await conflict_events(kube_double)
        assert sorted(e["involvedObject"]["name"] for e in events) == ["cache", "db"]
        kube_double.delete("v1", "pods", "cache", "default")  # satisfiable again: sent
        await settle(lambda: len(drs_state(si)) == 3, "VM group, host group, VM-Host rule")


async def test_a_conflict_found_while_nats_is_down_reaches_the_stream_once_after(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """The runtime outbox keeps the event through a 10 s outage of the real nats-server."""
    async with (
        labeller(vc, nats_server, kubeconfig),
        running_translator(drs_config(vc, nats_server, kubeconfig)) as drs,
    ):
        stopped = datetime.now(UTC)
        await nats_server.stop()
        for i in range(1, 5):  # 4 anti-affine replicas on 3 hosts: a conflict, made now
            kube_double.seed(pod_manifest(f"r{i}", f"node{i}", WEB, apart_from=WEB))
        deadline = time.monotonic() + 10
        while len(await conflict_events(kube_double)) < 4:  # found, bus away
            assert time.monotonic() < deadline, "no DrsRuleConflict Events on the pods"
            await asyncio.sleep(0.1)
        await asyncio.sleep(max(0.0, 10.0 - (datetime.now(UTC) - stopped).total_seconds()))
        restarted = datetime.now(UTC)
        await nats_server.start()  # same port, same store
        async with nats_server.connection("checker") as bus:
            deadline = time.monotonic() + 30
            while not await events_of(bus, DrsRuleConflict):
                assert time.monotonic() < deadline, "the conflict never reached the stream"
                await asyncio.sleep(0.2)
            drs.translator.resync()  # a full cycle after the outage repeats nothing
            await cycles_after(drs, 1, within=30)
            conflicts = await events_of(bus, DrsRuleConflict)
    (conflict,) = conflicts
    assert conflict.reason == "too-few-hosts"
    assert conflict.pods == [f"default/r{i}" for i in range(1, 5)]
    made = datetime.strptime(conflict.occurred_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert stopped < made < restarted


async def test_a_conflict_published_into_a_partition_is_published_again_once_after(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """A publish written into a connection that is silently dead is lost by the client (nats-py
    buffers only while it knows it is disconnected): the outbox publishes it again after the
    reconnect, and JetStream's Nats-Msg-Id dedupe keeps it once."""
    proxy = TcpProxy("127.0.0.1", nats_server.port)
    await proxy.start()
    config = drs_config(vc, nats_server, kubeconfig)
    config = msgspec.structs.replace(
        config, nats=NatsSettings(servers=[f"nats://127.0.0.1:{proxy.port}"])
    )
    try:
        async with (
            labeller(vc, nats_server, kubeconfig),
            running_translator(config) as drs,
        ):
            assert proxy.partition() == 1
            for i in range(1, 5):  # 4 anti-affine replicas on 3 hosts: a conflict, made now
                kube_double.seed(pod_manifest(f"r{i}", f"node{i}", WEB, apart_from=WEB))
            deadline = time.monotonic() + 10
            while len(await conflict_events(kube_double)) < 4:
                assert time.monotonic() < deadline, "no DrsRuleConflict Events on the pods"
                await asyncio.sleep(0.1)
            await asyncio.sleep(7)  # past the publish timeout: the first attempt is lost
            assert proxy.reset() == 1  # the partition ends as a firewall dropping its state
            async with nats_server.connection("checker") as bus:
                deadline = time.monotonic() + 30
                while not await events_of(bus, DrsRuleConflict):
                    assert time.monotonic() < deadline, "the conflict never reached the stream"
                    await asyncio.sleep(0.2)
                drs.translator.resync()
                await cycles_after(drs, 1, within=30)
                conflicts = await events_of(bus, DrsRuleConflict)
    finally:
        await proxy.stop()
    assert [(e.reason, e.pods) for e in conflicts] == [
        ("too-few-hosts", [f"default/r{i}" for i in range(1, 5)])
    ]


async def test_after_resets_and_a_terminated_session_it_keeps_working_on_one_session(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """The translator's connection to vCenter is reset five times (each before a change it must
    write) and its session terminated once by an administrator: every change still reaches DRS,
    and vCenter never holds more than the one session of the translator."""
    admin = vc.connect()
    proxy = TcpProxy(vc.host, vc.port)
    await proxy.start()
    config = msgspec.structs.replace(
        drs_config(vc, nats_server, kubeconfig, drs=DrsSettings(error_retry_seconds=0.2)),
        vcenters=[vc.settings(name="vcsim", port=proxy.port)],
    )
    vms = {n: vm(admin, n) for n in NODES}
    try:
        async with labeller(vc, nats_server, kubeconfig):
            others = await asyncio.to_thread(session_keys, admin)
            async with running_translator(config) as drs:
                (translator_session,) = await asyncio.to_thread(session_keys, admin) - others
                counts = []
                for i in range(1, 6):
                    assert proxy.reset() >= 1, "the translator holds a connection to vCenter"
                    kube_double.seed(pod_manifest(f"p{i}", f"node{i}", {"app": f"a{i}"}))
                    kube_double.seed(
                        pod_manifest(
                            f"q{i}", f"node{i + 1}", {"app": f"b{i}"}, apart_from={"app": f"a{i}"}
                        )
                    )
                    pair = sorted([vms[f"node{i}"], vms[f"node{i + 1}"]])
                    await eventually(
                        lambda pair=pair: pair in anti_rules(admin).values(), f"rule {i}", 20
                    )
                    counts.append(len(await asyncio.to_thread(session_keys, admin)))
                assert drs.calls["reconnect"] >= 5, drs.calls
                # An administrator ends the translator's session: it logs in again by itself.
                current = await asyncio.to_thread(session_keys, admin) - others
                manager = admin.RetrieveContent().sessionManager
                await asyncio.to_thread(manager.TerminateSession, list(current))
                kube_double.delete("v1", "pods", "q5", "default")
                await eventually(lambda: len(anti_rules(admin)) == 4, "rule 5 removed", 20)
                counts.append(len(await asyncio.to_thread(session_keys, admin)))
                assert translator_session not in await asyncio.to_thread(session_keys, admin)
            after = await asyncio.to_thread(session_keys, admin)
    finally:
        await proxy.stop()
    print("vCenter sessions after each reset and after the termination:", counts)
    assert max(counts) <= len(others) + 1, counts  # ours: one at a time
    assert after == others  # and logged out at the end


async def test_a_node_and_a_host_gone_during_a_nats_outage_are_forgotten(
    vc: Vcsim, nats_server: NatsServer, kubeconfig: Path, bus: Bus
) -> None:
    """NATS returns without its store and only node1 and host-11 are written again: the other
    two are never reported deleted, so only a watch that reads the bucket again after the
    reconnect and drops what it did not replay forgets them; a watch kept across the reconnect
    plans with them for good."""
    topology = await bus.topology()
    for node, host in (("node1", ESXI_HOST), ("node2", OTHER_HOST)):
        await topology.put_node(placement(node, host.moid, version=1))
        await topology.put_host(host)
    async with running_translator(drs_config(vc, nats_server, kubeconfig)) as drs:
        assert drs.translator.placements.keys() == {"node1", "node2"}
        assert drs.translator.hosts.keys() == {"host-11", "host-12"}

        await bus_rebuilt_with(nats_server, [placement("node1", "host-11", version=1)], [ESXI_HOST])

        await eventually(
            lambda: drs.translator.placements.keys() == {"node1"}
            and drs.translator.hosts.keys() == {"host-11"},
            "node2 and host-12 dropped",
            15,
        )
        assert drs.translator.placements["node1"].host_moid == "host-11"


async def test_a_translator_started_while_vcenter_is_away_waits_not_ready_then_works(
    vc: Vcsim, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """A vCenter down or restarting at start costs a wait, not a crash loop: the first login is
    retried with backoff and /readyz says what it waits for (found by the fault campaign, seed 1:
    the process exited 1 until vCenter answered)."""
    proxy = TcpProxy(vc.host, vc.port)
    await proxy.start()
    port = proxy.port
    await proxy.refuse()
    config = drs_config(
        vc, nats_server, kubeconfig, vcenters=[vc.settings(name="vcsim", port=port)]
    )
    spec = service_spec(DrsTranslatorWork())
    try:
        async with labeller(vc, nats_server, kubeconfig), running_service(spec, config) as runner:
            url = f"http://127.0.0.1:{runner.health.port}/readyz"
            await eventually(lambda: runner.working.is_set(), "the Lease and the work started")
            await asyncio.sleep(3.0)  # several login attempts with vCenter refusing
            async with aiohttp.ClientSession() as http, http.get(url) as response:
                status, text = response.status, await response.text()
            assert (status, "vcenter connected" in text) == (503, True), text
            assert runner.working.is_set(), "the work ended while vCenter was away"
            await proxy.accept()
            deadline = time.monotonic() + 30
            while True:
                async with aiohttp.ClientSession() as http, http.get(url) as response:
                    if response.status == 200:
                        break
                assert time.monotonic() < deadline, await response.text()
                await asyncio.sleep(0.2)
    finally:
        await proxy.stop()
