"""The descheduler end to end: the Kubernetes double, a real nats-server, and stand-ins for the
controllers around it (tests/e2e/descheduler_harness.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.telemetry import Telemetry
from hostaffinity.schema import LABEL_ESXI_HOST, PodEvicted, VmiMigrationRequested
from tests.e2e.descheduler_harness import (
    Controllers,
    ReplicaSet,
    descheduler_config,
    eventually,
    launcher_object,
    node_object,
    pod_object,
    running_descheduler,
    terminating,
    web_pod,
)
from tests.e2e.harness import bus_rebuilt_with, metric
from tests.e2e.labeller_harness import (
    labeller_config,
    relocate,
    running,
    stream_events,
    wait_ready,
)
from tests.platform.builders.descheduler import kubevirt_json, vm_json, vmi_json
from tests.platform.bus_values import node_placement as placement
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

EVICTED_METRIC = "hostaffinity_descheduler_pods_evicted_total"
CYCLES_METRIC = "hostaffinity_descheduler_cycle_duration_seconds_count"
SPREAD_POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "profiles": [
        {
            "name": "spread",
            "pluginConfig": [
                {"name": "DefaultEvictor", "args": {}},
                {
                    "name": "RemovePodsViolatingInterPodAntiAffinity",
                    "args": {"includePreferred": True},
                },
            ],
            "plugins": {
                "deschedule": {"enabled": ["RemovePodsViolatingInterPodAntiAffinity"]},
                "balance": {"enabled": ["RemoveDuplicates"]},
            },
        }
    ],
}
PREFER_APART = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": "demo"}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    }
}


def write_policy(tmp_path: Path, policy: dict[str, Any]) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    return path


def per_node(kube: KubeDouble) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in kube.store.objects("pods", "default"):
        if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            node = pod["spec"]["nodeName"]
            counts[node] = counts.get(node, 0) + 1
    return counts


async def test_seed_001_piled_replicas_spread_after_uncordon_one_at_a_time_under_a_pdb(
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    tmp_path: Path,
    telemetry: Telemetry,
) -> None:
    kube = kube_double
    for name in ("worker-1", "worker-2", "worker-3"):
        kube.seed(node_object(name, unschedulable=name != "worker-1"))
    for i in range(5):
        kube.seed(
            pod_object(f"demo-{i}", "demo", "worker-1", owner="demo-rs", affinity=PREFER_APART)
        )
    kube.seed(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "demo"}}},
        }
    )
    controllers = Controllers(kube, [ReplicaSet("demo-rs", "demo", 5, PREFER_APART)])
    config = descheduler_config(
        nats_server, kubeconfig, write_policy(tmp_path, SPREAD_POLICY), debounce_seconds=0.5
    )
    evicted_before = metric(EVICTED_METRIC, result="evicted")
    cycles_before = metric(CYCLES_METRIC)
    helpers = asyncio.create_task(controllers.run())
    try:
        async with running_descheduler(config) as service:
            await eventually(
                lambda: service.loop is not None and service.loop.cycles >= 1, "first cycle"
            )
            await asyncio.sleep(1.0)
            assert controllers.evicted == []  # nowhere to go while the others are cordoned
            stuck = [
                e
                for e in kube.store.objects("events", "default")
                if e.get("reason") == "NotDescheduled"
            ]
            assert stuck, "the violation was left in place without an Event saying so"
            assert "left in place: no other node" in stuck[0]["message"]
            uncordoned = time.monotonic()
            for name in ("worker-2", "worker-3"):
                kube.write(node_object(name))
            await eventually(lambda: bool(controllers.evicted), "a first eviction", within=5)
            first = controllers.evicted[0][0] - uncordoned
            assert first < 0.5 + 1.5, f"first eviction {first:.2f}s after the uncordon"
            await eventually(
                lambda: max(per_node(kube).values(), default=0) <= 2
                and sum(per_node(kube).values()) == 5,
                "replicas spread",
                within=30,
            )
            assert service.executor is not None
            await eventually(service.executor.idle, "evictions finished", within=10)
    finally:
        helpers.cancel()
    assert len(controllers.evicted) == 3, controllers.evicted
    assert metric(EVICTED_METRIC, result="evicted") - evicted_before == 3
    assert metric(EVICTED_METRIC, result="blocked") >= 1
    assert metric(CYCLES_METRIC) > cycles_before
    assert controllers.min_available == 4  # maxUnavailable 1: one replica away at a time
    bus = await Bus.connect(nats_server.settings(), name="test")
    try:
        events = [e for e in await stream_events(bus) if isinstance(e, PodEvicted)]
    finally:
        await bus.close()
    assert sorted(e.pod for e in events if e.result == "evicted") == sorted(
        f"default/{name}" for _, name in controllers.evicted
    )
    pod_events = [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "Descheduled"
    ]
    assert len(pod_events) == 3
    blocked = [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "EvictionBlocked"
    ]
    assert blocked, "the PDB never said 429: the test did not exercise the retry"
    assert all(
        "RemovePodsViolating" in e["message"] or "RemoveDuplicates" in e["message"]
        for e in pod_events
    )


MAINTENANCE = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def in_maintenance(name: str) -> dict[str, Any]:
    """A node with a NoSchedule taint no VM tolerates: RemovePodsViolatingNodeTaints moves them."""
    node = node_object(name)
    node["spec"] = {"taints": [MAINTENANCE]}
    return node


def vm_migrations(kube: KubeDouble) -> list[dict[str, Any]]:
    return kube.store.objects("virtualmachineinstancemigrations.kubevirt.io", "default")


TAINT_POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "profiles": [
        {
            "name": "taints",
            "pluginConfig": [],
            "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
        }
    ],
}


async def test_kubevirt_vmis_are_migrated_never_evicted_within_kubevirts_limits(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, tmp_path: Path
) -> None:
    kube = kube_double
    for name in ("worker-1", "worker-2", "worker-3"):
        kube.seed(in_maintenance(name))
    kube.seed(node_object("spare-1"))
    kube.seed(node_object("spare-2"))
    sources = ["worker-1", "worker-2", "worker-3"]
    for i in range(10):
        kube.seed(vmi_json(f"vm-{i}", sources[i % 3]))
        kube.seed(launcher_object(f"vm-{i}", sources[i % 3]))
    kube.seed(vmi_json("pinned", "worker-1", migratable=False))
    kube.seed(launcher_object("pinned", "worker-1"))
    config = descheduler_config(
        nats_server, kubeconfig, write_policy(tmp_path, TAINT_POLICY), debounce_seconds=0.2
    )

    def migrations() -> list[dict[str, Any]]:
        return vm_migrations(kube)

    async with running_descheduler(config) as service:
        await eventually(lambda: len(migrations()) == 5, "five migrations")
        # More cycles while those are in flight create none: the limits count them.
        assert service.loop is not None
        cycles = service.loop.cycles
        kube.write(node_object("spare-3"))  # a trigger
        await eventually(
            lambda: service.loop is not None and service.loop.cycles > cycles, "another cycle"
        )
        assert len(migrations()) == 5
        by_source: dict[str, int] = {}
        for migration in migrations():
            vmi = kube.read(
                "kubevirt.io/v1", "virtualmachineinstances", migration["spec"]["vmiName"], "default"
            )
            assert vmi is not None
            source = vmi["status"]["nodeName"]
            by_source[source] = by_source.get(source, 0) + 1
        assert max(by_source.values()) <= 2
        # One finishes: exactly one more may start.
        done = migrations()[0]
        kube.write({**done, "status": {"phase": "Succeeded"}}, manager="virt-controller")
        await eventually(lambda: len(migrations()) == 6, "a sixth migration after one finished")
        assert service.executor is not None
        await eventually(service.executor.idle, "the executor done")
    pods = kube.store.objects("pods", "default")
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods), "a VM pod was evicted"
    assert not any(m["spec"]["vmiName"] == "pinned" for m in migrations())
    # No KubeVirt CR: KubeVirt's default limits, and no target pinned (version unknown).
    assert not any("addedNodeSelector" in m["spec"] for m in migrations())
    warnings = [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "CannotLiveMigrate"
    ]
    assert warnings
    assert warnings[0]["involvedObject"]["name"] == "pinned"
    assert "non-shared PVCs" in warnings[0]["message"]
    bus = await Bus.connect(nats_server.settings(), name="test")
    try:
        requested = [
            e
            for e in await stream_events(bus)
            if isinstance(e, VmiMigrationRequested) and e.result == "migrated"
        ]
    finally:
        await bus.close()
    assert len(requested) == 6


@pytest.mark.usefixtures("telemetry")
async def test_a_vm_that_cannot_migrate_is_restarted_elsewhere_only_with_consent_and_pdb(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """Two VMs that cannot live-migrate on a node with a NoSchedule taint: the one whose VMI
    carries descheduler.alpha.kubernetes.io/evict has its launcher pod evicted through the
    Eviction API -- once its PodDisruptionBudget allows it -- the other only gets the Event."""
    kube = kube_double
    kube.seed(in_maintenance("worker-1"))
    kube.seed(node_object("spare-1"))
    consent = {"descheduler.alpha.kubernetes.io/evict": "true"}
    kube.seed(vmi_json("consented", "worker-1", migratable=False, annotations=consent))
    kube.seed(vmi_json("pinned", "worker-1", migratable=False))
    for name in ("consented", "pinned"):
        kube.seed(launcher_object(name, "worker-1"))
    only_consented = {"matchLabels": {"vm.kubevirt.io/name": "consented"}}
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "consented", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": only_consented},
    }
    kube.seed(budget)
    controllers = Controllers(kube, [])
    config = descheduler_config(
        nats_server, kubeconfig, write_policy(tmp_path, TAINT_POLICY), debounce_seconds=0.2
    )
    blocked_before = metric(EVICTED_METRIC, result="blocked")
    helpers = asyncio.create_task(controllers.run())
    try:
        async with running_descheduler(config):
            await eventually(
                lambda: metric(EVICTED_METRIC, result="blocked") > blocked_before,
                "the PDB refusing the restart",
            )
            assert controllers.evicted == []
            stored = kube.read("policy/v1", "poddisruptionbudgets", "consented", "default")
            assert stored is not None
            kube.write({**stored, "spec": {**stored["spec"], "maxUnavailable": 1}})
            await eventually(lambda: bool(controllers.evicted), "the consented VM's pod evicted")
    finally:
        helpers.cancel()
    assert [name for _, name in controllers.evicted] == ["virt-launcher-consented-x7k2p"]
    assert vm_migrations(kube) == []
    warnings = [
        e for e in kube.store.objects("events", "default") if e.get("reason") == "CannotLiveMigrate"
    ]
    assert {e["involvedObject"]["name"] for e in warnings} == {"pinned"}


async def test_the_kubevirt_crs_limits_hold_and_its_version_lets_the_target_be_pinned(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """KubeVirt v1.6 with parallelMigrationsPerCluster 2: two migrations at once, each pinned
    by addedNodeSelector to the node the descheduler checked, and the Event says so."""
    kube = kube_double
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubevirt"}})
    kube.seed(kubevirt_json("v1.6.0", per_cluster=2))
    kube.seed(in_maintenance("worker-1"))
    for name in ("spare-1", "spare-2"):
        kube.seed(node_object(name))
    for i in range(3):
        kube.seed(vmi_json(f"vm-{i}", "worker-1"))
        kube.seed(launcher_object(f"vm-{i}", "worker-1"))
    config = descheduler_config(
        nats_server, kubeconfig, write_policy(tmp_path, TAINT_POLICY), debounce_seconds=0.2
    )

    async with running_descheduler(config) as service:
        await eventually(lambda: len(vm_migrations(kube)) == 2, "two migrations")
        assert service.loop is not None
        cycles = service.loop.cycles
        kube.write(node_object("spare-3"))  # a trigger: the CR's limit still holds
        await eventually(
            lambda: service.loop is not None and service.loop.cycles > cycles, "another cycle"
        )
        assert len(vm_migrations(kube)) == 2
    pinned = [m["spec"]["addedNodeSelector"] for m in vm_migrations(kube)]
    targets = [selector["kubernetes.io/hostname"] for selector in pinned]
    assert set(targets) <= {"spare-1", "spare-2"}
    migrating = [
        e["message"] for e in kube.store.objects("events", "default") if e["reason"] == "Migrating"
    ]
    assert len(migrating) == 2
    assert all("(addedNodeSelector)" in message for message in migrating)


async def test_a_kubevirt_cr_allowing_no_migration_gets_none_until_it_allows_one(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """parallelMigrationsPerCluster 0 means no migration (KubeVirt's API: a pointer, 0 is a
    value, not unset), through the informer as the descheduler reads the CR: the VMs on the
    node in maintenance stay, each with its reason (the cycle's plan, and the log). Raised to
    1, the change alone starts a cycle and one VM migrates."""
    kube = kube_double
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubevirt"}})
    kube.seed(kubevirt_json("v1.6.0", per_cluster=0))
    kube.seed(in_maintenance("worker-1"))
    kube.seed(node_object("spare-1"))
    for i in range(2):
        kube.seed(vmi_json(f"vm-{i}", "worker-1"))
        kube.seed(launcher_object(f"vm-{i}", "worker-1"))
    # No interval within the test: only a change starts a cycle.
    config = descheduler_config(
        nats_server,
        kubeconfig,
        write_policy(tmp_path, TAINT_POLICY),
        debounce_seconds=0.2,
        interval_seconds=3600,
    )

    async with running_descheduler(config) as service:
        loop = service.loop
        assert loop is not None

        def held_back() -> list[str]:
            skipped = [] if loop.last is None else loop.last.plan.skipped
            return [
                pod
                for skip in skipped
                for pod, why in skip.reasons
                if why == "KubeVirt allows no live migration (a per-cluster limit of 0)"
            ]

        await eventually(lambda: len(held_back()) == 2, "both VMs held back, with the reason")
        assert vm_migrations(kube) == []
        cycles = loop.cycles
        stored = kube.read("kubevirt.io/v1", "kubevirts", "kubevirt", "kubevirt")
        assert stored is not None
        stored["spec"]["configuration"]["migrations"]["parallelMigrationsPerCluster"] = 1
        kube.write(stored)
        await eventually(lambda: len(vm_migrations(kube)) == 1, "one migration once allowed")
        assert loop.cycles > cycles
        await asyncio.sleep(0.5)  # the next cycles keep to the limit of 1
        assert len(vm_migrations(kube)) == 1


async def test_a_vm_whose_new_placement_waits_for_a_restart_is_reported(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, telemetry: Telemetry
) -> None:
    """A VM's template now keeps it apart from db replicas on ESXi hosts, but KubeVirt holds the
    change for a restart (RestartRequired): a Warning Event on the VM, and the gauge counts it;
    once the VMI has the rule (the VM restarted), the gauge drops."""
    kube = kube_double
    kube.seed(node_object("worker-1"))
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": LABEL_ESXI_HOST}
            ]
        }
    }
    kube.seed(vm_json("db-0", template_affinity=apart, restart_required=True))
    running = vmi_json("db-0", "worker-1", owner=("VirtualMachine", "db-0"))
    kube.seed(running)
    kube.seed(launcher_object("db-0", "worker-1"))
    config = descheduler_config(nats_server, kubeconfig, None, debounce_seconds=0.2)
    gauge = "hostaffinity_descheduler_vms_awaiting_restart"
    async with running_descheduler(config):

        def reported() -> list[dict[str, Any]]:
            events = kube.store.objects("events", "default")
            return [e for e in events if e.get("reason") == "PlacementAwaitsRestart"]

        await eventually(lambda: bool(reported()), "the Event on the VM")
        [event] = reported()
        assert event["involvedObject"]["kind"] == "VirtualMachine"
        assert event["involvedObject"]["name"] == "db-0"
        assert "template's affinity differs from the running VMI's" in event["message"]
        assert metric(gauge) == 1
        kube.write({**running, "spec": {**running["spec"], "affinity": apart}})
        await eventually(lambda: metric(gauge) == 0, "the gauge cleared after the restart")


@pytest.mark.parametrize("hosts", [3, 2], ids=["another-host-fits", "no-other-host"])
async def test_seed_004_vmotion_onto_a_shared_host_evicts_exactly_one(
    hosts: int,
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
) -> None:
    kube = kube_double
    # vcsim puts VM i on host i mod `hosts`: node1 on H0, node2 on H1, node3 (if 3) on H2.
    names = [f"node{i}" for i in range(1, hosts + 1)]
    vc = vcsim(hosts=hosts, vm_names=names)
    for name in names:
        kube.seed(node_object(name))
    kube.seed(web_pod("web-1", "node1"))
    kube.seed(web_pod("web-2", "node2"))
    config = descheduler_config(nats_server, kubeconfig)
    async with running(labeller_config(vc, nats_server, kubeconfig)) as labeller:
        await wait_ready(labeller)
        async with running_descheduler(config) as service:
            assert service.loop is not None
            await eventually(
                lambda: service.loop is not None and service.loop.cycles >= 1, "first cycle"
            )
            assert terminating(kube) == []
            # Hold the label patch of node2: only the topology KV can tell the descheduler.
            hold = kube.hold_patches("nodes", "node2")
            cycles = service.loop.cycles
            relocate(vc.connect(), "node2", "DC0_C0_H0")
            moved = time.monotonic()
            if hosts == 3:
                await eventually(lambda: bool(terminating(kube)), "an eviction", within=5)
                assert time.monotonic() - moved < 2.0
                await asyncio.sleep(1.5)  # more cycles run: still only one
                assert len(terminating(kube)) == 1, terminating(kube)
            else:
                await eventually(
                    lambda: service.loop is not None and service.loop.cycles > cycles,
                    "a cycle after the move",
                )
                await asyncio.sleep(1.0)
                assert terminating(kube) == []
                assert service.loop.last is not None
                [skip] = service.loop.last.plan.skipped
                assert "esxi-host=DC0_C0_H0" in skip.rule
            hold.release()


async def test_a_pod_that_lands_back_is_not_evicted_again_inside_the_cooldown(
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    bus: Bus,
    tmp_path: Path,
) -> None:
    """A loop the descheduler cannot see coming: kube-scheduler prefers node n2 (a preferred
    node affinity this policy does not enforce), so the evicted replica comes straight back to
    the same ESXi host. The cooldown stops a second eviction."""
    kube = kube_double
    topology = await bus.topology()
    for name, host in (("n1", "esx-a"), ("n2", "esx-a"), ("n3", "esx-b")):
        kube.seed(node_object(name))
        await topology.put_node(placement(name, host))
    likes_n2 = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}
                        ]
                    },
                }
            ]
        }
    }
    kube.seed(pod_object("web-0", "web", "n1", owner="web-rs", affinity=likes_n2))
    kube.seed(pod_object("web-1", "web", "n2", owner="web-rs", affinity=likes_n2))
    policy = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [
            {
                "name": "hosts",
                "pluginConfig": [{"name": "RemoveDuplicates", "args": {"domain": "esxi-host"}}],
                "plugins": {"balance": {"enabled": ["RemoveDuplicates"]}},
            }
        ],
    }
    controllers = Controllers(kube, [ReplicaSet("web-rs", "web", 2, likes_n2)])
    config = descheduler_config(
        nats_server,
        kubeconfig,
        write_policy(tmp_path, policy),
        debounce_seconds=0.1,
        interval_seconds=0.3,
        cooldown_seconds=60,
    )
    helpers = asyncio.create_task(controllers.run())
    try:
        async with running_descheduler(config) as service:
            await eventually(lambda: bool(controllers.evicted), "the first eviction")
            await eventually(
                lambda: any(
                    p["spec"].get("nodeName") == "n2"
                    and "new" in p["metadata"]["name"]
                    and not p["metadata"].get("deletionTimestamp")
                    for p in kube.store.objects("pods", "default")
                ),
                "the replacement back on n2",
            )
            assert service.loop is not None
            cycles = service.loop.cycles
            await eventually(
                lambda: service.loop is not None and service.loop.cycles >= cycles + 3,
                "three more cycles",
            )
            assert service.loop.last is not None
            reasons = [why for skip in service.loop.last.plan.skipped for _, why in skip.reasons]
    finally:
        helpers.cancel()
    assert len(controllers.evicted) == 1, controllers.evicted
    assert any("cooling down" in why for why in reasons), reasons


async def test_nats_down_loses_nothing(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> None:
    """NATS stops while a node is tainted: the descheduler does not crash, the pod is evicted
    (during the outage, or once the topology watch is back), and the pod.evicted event reaches
    the stream after NATS returns."""
    kube = kube_double
    kube.seed(node_object("worker-1"))
    kube.seed(node_object("worker-2"))
    kube.seed(pod_object("app-0", "app", "worker-1", owner="app-rs", affinity=None))
    config = descheduler_config(nats_server, kubeconfig, debounce_seconds=0.2)
    async with running_descheduler(config) as service:
        await eventually(
            lambda: service.loop is not None and service.loop.cycles >= 1, "first cycle"
        )
        await nats_server.stop()
        tainted = node_object("worker-1")
        tainted["spec"] = {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}
        kube.write(tainted)
        await asyncio.sleep(2.0)  # NATS stays away a while
        await nats_server.start()
        await eventually(lambda: terminating(kube) == ["app-0"], "the eviction", within=30)
        assert service.executor is not None
        await eventually(service.executor.idle, "the executor idle")
        bus = await Bus.connect(nats_server.settings(), name="test")
        try:

            async def published() -> bool:
                events = await stream_events(bus)
                return any(isinstance(e, PodEvicted) and e.pod == "default/app-0" for e in events)

            for _ in range(150):
                if await published():
                    break
                await asyncio.sleep(0.1)
            assert await published(), "pod.evicted never reached the stream"
        finally:
            await bus.close()


async def test_a_node_gone_during_a_nats_outage_loses_its_placement(
    kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path, bus: Bus
) -> None:
    """NATS returns without its store and only worker-a is written again: worker-b's deletion is
    never delivered, so only a watch that reads the bucket again after the reconnect and drops
    what it did not replay forgets worker-b's ESXi host; a watch kept across the reconnect
    never hears of it."""
    topology = await bus.topology()
    for node in ("worker-a", "worker-b"):
        kube_double.seed(node_object(node))
        await topology.put_node(placement(node, "esx-1"))
    async with running_descheduler(descheduler_config(nats_server, kubeconfig)) as service:
        assert service.state is not None
        index = service.state.index
        assert index.domain("worker-b", LABEL_ESXI_HOST) == "esx-1"

        await bus_rebuilt_with(nats_server, [placement("worker-a", "esx-1")])

        await eventually(
            lambda: index.domain("worker-b", LABEL_ESXI_HOST) is None,
            "worker-b's placement dropped",
            within=15,
        )
        assert index.domain("worker-a", LABEL_ESXI_HOST) == "esx-1"
        await eventually(service.synced, "descheduler synced again")
