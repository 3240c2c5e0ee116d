"""A kill at every step: each write path run as its own process, killed by SIGKILL and by SIGTERM
at each of its checkpoints in turn, then its successor run over what it left; each change must be
in Kubernetes or vCenter, and on the bus, exactly once (tests/e2e/kill_harness.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostaffinity.descheduler.executor import EVICTION_PATH, MIGRATION_PATH, migration_name
from hostaffinity.drs_translator.apply_steps import DRS_APPLY_PATH
from hostaffinity.node_labeller.labeller import LABEL_PATH
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    DrsRuleConflict,
    DrsRulesApplied,
    NodeLabelled,
    PodEvicted,
    TopologyEvent,
    VmiMigrationRequested,
    VmMoved,
    event_id,
)
from tests.e2e.descheduler_harness import (
    descheduler_config,
    launcher_object,
    node_object,
    pod_object,
    running_descheduler,
    terminating,
)
from tests.e2e.drs_harness import (
    anti_rules,
    cycles_after,
    drs_config,
    drs_state,
    kept_announcements,
    pod_manifest,
    records,
    running_translator,
    vm,
)
from tests.e2e.harness import eventually, eventually_async
from tests.e2e.kill_harness import assert_passed_in_order, kill_cases, run_until_killed, stored_once
from tests.e2e.labeller_harness import (
    labeller_config,
    node_labels,
    relocate,
    running,
    vm_by_name,
    wait_ready,
)
from tests.e2e.labeller_harness import node_object as labeller_node
from tests.platform.builders.descheduler import vmi_json
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

DESCHEDULER = "hostaffinity.descheduler.main"
DRS_TRANSLATOR = "hostaffinity.drs_translator.main"
NODE_LABELLER = "hostaffinity.node_labeller.main"
TAINT_POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    # One eviction per cycle: the second pod of a workload waits for the next cycle, where the
    # workload's cooldown (inherited by a new leader) holds it back.
    "maxNoOfPodsToEvictTotal": 1,
    "profiles": [
        {
            "name": "taints",
            "pluginConfig": [],
            "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
        }
    ],
}


def tainted(name: str) -> dict[str, Any]:
    """A node under a NoSchedule taint nothing tolerates: its pods are to move."""
    node = node_object(name)
    node["spec"] = {"taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}
    return node


def taint_policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(TAINT_POLICY), encoding="utf-8")
    return path


def open_intents(events: Sequence[TopologyEvent]) -> list[str]:
    """The descheduler's intents (`requested`) nothing answered, in stream order."""
    open_: dict[tuple[type, str], str] = {}
    for event in events:
        if isinstance(event, PodEvicted | VmiMigrationRequested):
            key = (type(event), event.pod_uid)
            if event.result == "requested":
                open_[key] = event.id
            else:
                open_.pop(key, None)
    return list(open_.values())


async def successor_settles(kube: KubeDouble, nats: NatsServer, config: Any) -> None:
    """The next leader: synced, a cycle run and every attempt it made done; then stopped as
    SIGTERM stops it."""
    async with running_descheduler(config, identity="successor") as work:
        await eventually(lambda: work.loop is not None and work.loop.cycles >= 1, "a cycle")
        await eventually(lambda: work.executor is not None and work.executor.idle(), "idle")
        await asyncio.sleep(0.2)  # a retry or a late cycle would show here


@pytest.mark.parametrize(("checkpoint", "signame"), kill_cases(EVICTION_PATH))
async def test_eviction_path(
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    bus: Bus,
    tmp_path: Path,
    checkpoint: str,
    signame: str,
) -> None:
    """Two pods of one ReplicaSet on a tainted node: one is evicted, and its `pod.evicted` is on
    the bus once, so the next leader cools the workload down and leaves the other where it is
    for the cooldown."""
    kube = kube_double
    kube.seed(tainted("worker-1"))
    kube.seed(node_object("worker-2"))
    for name in ("app-0", "app-1"):
        pod = pod_object(name, "app", "worker-1", owner="app-rs", affinity=None)
        pod["metadata"]["uid"] = f"uid-{name}"
        kube.seed(pod)
    config = descheduler_config(
        nats_server, kubeconfig, taint_policy(tmp_path), debounce_seconds=0.1
    )
    killed = await run_until_killed(DESCHEDULER, config, tmp_path, checkpoint, signame)
    assert_passed_in_order(killed, EVICTION_PATH, checkpoint)

    await successor_settles(kube, nats_server, config)

    evicted = terminating(kube)
    assert len(evicted) == 1, f"one pod of app-rs evicted within its cooldown, not {evicted}"
    (pod,) = evicted
    stored = await stored_once(bus)
    assert open_intents(stored) == []
    events = [e for e in stored if isinstance(e, PodEvicted)]
    outcomes = [e for e in events if e.result == "evicted"]
    assert [(e.pod, e.id) for e in outcomes] == [
        (f"default/{pod}", event_id("pod.evicted", f"uid-{pod}", "evicted"))
    ], events


@pytest.mark.parametrize(("checkpoint", "signame"), kill_cases(MIGRATION_PATH))
async def test_migration_path(
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    bus: Bus,
    tmp_path: Path,
    checkpoint: str,
    signame: str,
) -> None:
    """A VM on a tainted node: one VirtualMachineInstanceMigration, and its
    `vmi.migration.requested` on the bus once."""
    kube = kube_double
    kube.seed(tainted("worker-1"))
    kube.seed(node_object("worker-2"))
    kube.seed(vmi_json("vm-0", "worker-1"))
    launcher = launcher_object("vm-0", "worker-1")
    launcher["metadata"]["uid"] = "uid-launcher"
    kube.seed(launcher)
    config = descheduler_config(
        nats_server, kubeconfig, taint_policy(tmp_path), debounce_seconds=0.1
    )
    killed = await run_until_killed(DESCHEDULER, config, tmp_path, checkpoint, signame)
    assert_passed_in_order(killed, MIGRATION_PATH, checkpoint)

    await successor_settles(kube, nats_server, config)

    migrations = kube.store.objects("virtualmachineinstancemigrations.kubevirt.io", "default")
    name = migration_name("vm-0", "uid-launcher")
    assert [m["metadata"]["name"] for m in migrations] == [name]
    assert terminating(kube) == []  # a VM's pod is never evicted
    stored = await stored_once(bus)
    assert open_intents(stored) == []
    events = [e for e in stored if isinstance(e, VmiMigrationRequested)]
    outcomes = [e for e in events if e.result == "migrated"]
    assert [(e.migration, e.id) for e in outcomes] == [
        (name, event_id("vmi.migration.requested", "uid-launcher", "migrated"))
    ], events


@pytest.mark.parametrize(("checkpoint", "signame"), kill_cases(DRS_APPLY_PATH))
async def test_drs_apply_path(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
    tmp_path: Path,
    checkpoint: str,
    signame: str,
) -> None:
    """Two anti-affine pods: one rule in vCenter (never removed and added back: it keeps its
    key), one record, applied, and the batch announced once, its kept copy gone."""
    nodes = ["node1", "node2", "node3"]
    vc = vcsim(hosts=3, vm_names=nodes)
    for name in nodes:
        kube_double.seed(labeller_node(name))
    si = vc.connect()
    expected = sorted([vm(si, "node1"), vm(si, "node3")])
    web = {"app": "web"}
    kube_double.seed(pod_manifest("p1", "node1", web, apart_from=web))
    kube_double.seed(pod_manifest("p2", "node3", web, apart_from=web))
    config = drs_config(vc, nats_server, kubeconfig)
    async with running(labeller_config(vc, nats_server, kubeconfig)) as labeller:
        await wait_ready(labeller)
        killed = await run_until_killed(DRS_TRANSLATOR, config, tmp_path, checkpoint, signame)
        assert_passed_in_order(killed, DRS_APPLY_PATH, checkpoint)
        keys = {v["name"]: v["key"] for v in drs_state(si).values()}
        async with running_translator(config) as successor:
            await eventually_async(
                lambda: all_applied_and_announced(bus), "one record applied, nothing kept", 20
            )
            successor.translator.resync()  # a full cycle over what vCenter holds changes nothing
            await cycles_after(successor, 1)

    assert list(anti_rules(si).values()) == [expected]
    state = drs_state(si)
    assert len(state) == 1, state  # no twin, no orphan
    (rule,) = state.values()
    assert keys.get(rule["name"], rule["key"]) == rule["key"]  # the rule made before the kill
    (record,) = (await records(bus)).values()
    assert (record.state, record.vms) == ("applied", expected)
    events = await stored_once(bus)
    assert [e for e in events if isinstance(e, DrsRuleConflict)] == []
    announced = [e for e in events if isinstance(e, DrsRulesApplied) and record.name in e.added]
    assert len(announced) == 1, announced


async def all_applied_and_announced(bus: Bus) -> bool:
    owned = await records(bus)
    return [r.state for r in owned.values()] == ["applied"] and await kept_announcements(bus) == []


@pytest.mark.parametrize(("checkpoint", "signame"), kill_cases(LABEL_PATH))
async def test_label_path(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
    tmp_path: Path,
    checkpoint: str,
    signame: str,
) -> None:
    """A vMotion found by a labeller that restarts: the KV and the label follow vCenter, and
    `vm.moved` and `node.labelled` are on the bus once each."""
    vc = vcsim(hosts=2, vm_names=["node1", "node2"])
    for name in ("node1", "node2"):
        kube_double.seed(labeller_node(name))
    config = labeller_config(vc, nats_server, kubeconfig)
    async with running(config) as first:
        await wait_ready(first)
    si = vc.connect()
    before = vm_by_name(si, "node1").runtime.host.name
    after = next(h for h in ("DC0_C0_H0", "DC0_C0_H1") if h != before)
    relocate(si, "node1", after)

    killed = await run_until_killed(NODE_LABELLER, config, tmp_path, checkpoint, signame)
    assert_passed_in_order(killed, LABEL_PATH, checkpoint)
    async with running(config, identity="successor") as successor:
        await wait_ready(successor)
        await eventually(successor.labeller.idle, "the labeller idle")

    placement = await (await bus.topology()).get_node("node1")
    assert placement is not None
    assert placement.host_name == after
    assert node_labels(kube_double, "node1")[LABEL_ESXI_HOST] == after
    events = await stored_once(bus)
    moved = [e for e in events if isinstance(e, VmMoved) and e.node == "node1"]
    assert [(e.from_host_name, e.to_host_name) for e in moved] == [(before, after)], moved
    labelled = [
        e.labels[LABEL_ESXI_HOST]
        for e in events
        if isinstance(e, NodeLabelled) and e.node == "node1"
    ]
    assert labelled == [before, after], labelled
