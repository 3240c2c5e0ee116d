"""`hostaffinity topology | exposure | what-if maintenance` (and `explain` of a KubeVirt VM's pod)
against the Kubernetes double and a real nats-server; the what-if and topology cases take their
placements from the node-labeller following vcsim (one vCenter, or two whose host names and moids
repeat), the others from placements written to the topology KV."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import (
    DRS_BUCKET,
    LABEL_ESXI_HOST,
    DrsOwnership,
    EsxiHost,
    NodePlacement,
    drs_rule_key,
)
from tests.e2e.labeller_harness import (
    VC_A_NODES,
    VC_B_NODES,
    LabellerParts,
    eventually,
    host_by_name,
    labeller_config,
    node_labels,
    node_object,
    running,
    vm_by_name,
    wait_ready,
)
from tests.integration.cli_runner import Cli
from tests.platform.bus_values import node_placement
from tests.platform.console import exit_code
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

ANTI_HOST = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": LABEL_ESXI_HOST}
        ]
    }
}
ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def deployment_pod(
    index: int, node: str, affinity: dict[str, Any] | None = None, app: str = "web"
) -> dict[str, Any]:
    """Replica `index` of the Deployment `app` (its ReplicaSet `<app>-5d8f7`), bound to `node`."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
            }
        ],
    }
    if affinity is not None:
        spec["affinity"] = affinity
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": f"{app}-5d8f7",
        "uid": f"uid-{app}-5d8f7",
        "controller": True,
    }
    metadata = {
        "name": f"{app}-5d8f7-{index}",
        "namespace": "shop",
        "labels": {"app": app, "pod-template-hash": "5d8f7"},
        "ownerReferences": [owner],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def host_of(si: Any, vm_name: str) -> str:
    return str(vm_by_name(si, vm_name).runtime.host.name)


def placement(node: str, host: str) -> NodePlacement:
    return node_placement(node, f"host-{host}", host_label=host)


def esxi_host(host: str) -> EsxiHost:
    return EsxiHost(
        moid=f"host-{host}", name=f"{host}.example.com", label=host, cluster_moid="domain-c7",
        cluster_name="C0", datacenter="DC0", connection_state="connected",
        in_maintenance_mode=False,
    )  # fmt: skip


async def seed_kv_cluster(kube: KubeDouble, bus: Bus, hosts: dict[str, str]) -> None:
    topology = await bus.topology()
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    for node, host in hosts.items():
        kube.seed(node_object(node, status={"allocatable": ALLOCATABLE}))
        await topology.put_node(placement(node, host))
        await topology.put_host(esxi_host(host))


async def test_exposure_finds_two_of_three_replicas_on_one_host_then_reports_the_rule(
    kube_double: KubeDouble, bus: Bus, cli: Cli
) -> None:
    await seed_kv_cluster(kube_double, bus, {"n1": "esx-a", "n2": "esx-a", "n3": "esx-b"})
    for index, node in enumerate(("n1", "n2", "n3")):
        kube_double.seed(deployment_pod(index, node))

    code, report = await cli.json("exposure")
    assert code == 0
    assert report == {
        "min_replicas": 2,
        "workloads": [
            {
                "kind": "Deployment", "namespace": "shop", "name": "web", "replicas": 3,
                "hosts": 2, "worst_host": "esx-a", "on_worst_host": 2, "share": 0.6667,
                "unplaced": 0, "coverage": "none", "drs_rule": False, "spread": "none",
                "spread_violated": False,
            }
        ],
    }  # fmt: skip
    code, out, err = await cli("exposure", "--fail-on-exposed")
    assert code == 1
    assert "2/3 (67%)" in out
    # Progress on stderr, never on stdout (other log lines may interleave in one test process).
    assert "reading pods ..." in err
    assert re.search(r" 3 in \d+\.\d s", err)
    assert "reading" not in out

    for index in range(3):  # pods are immutable: the Deployment rolls them with the new spec
        kube_double.delete("v1", "pods", f"web-5d8f7-{index}", "shop")
    for index, node in enumerate(("n1", "n2", "n3")):
        kube_double.seed(deployment_pod(index, node, ANTI_HOST))
    code, report = await cli.json("exposure", "-n", "shop")
    assert [(w["name"], w["coverage"], w["share"]) for w in report["workloads"]] == [
        ("web", "required", 0.6667)
    ]
    code, report = await cli.json("exposure", "-n", "elsewhere")
    assert report["workloads"] == []


async def test_exposure_marks_a_workload_with_a_drs_rule_of_ours(
    kube_double: KubeDouble, bus: Bus, cli: Cli
) -> None:
    await seed_kv_cluster(kube_double, bus, {"n1": "esx-a", "n2": "esx-a"})
    for index, node in enumerate(("n1", "n2")):
        kube_double.seed(deployment_pod(index, node))
        kube_double.seed(deployment_pod(index, node, app="api"))
    kube_double.seed(deployment_pod(0, "n1", app="old"))
    kube_double.seed(deployment_pod(1, "n2", app="old"))
    drs = await bus.js.key_value(DRS_BUCKET)  # the layout creates it
    for name, pods, state in (
        ("web", ["shop/web-5d8f7-0", "shop/web-5d8f7-1"], "applied"),
        ("old", ["shop/old-5d8f7-0", "shop/old-5d8f7-1"], "removing"),
    ):
        record = DrsOwnership(
            vcenter="vc", cluster_moid="domain-c7", name=f"hostaffinity-{name}",
            kind="vm-anti-affinity", vms=["vm-n1", "vm-n2"], pods=pods, state=state,
        )  # fmt: skip
        await drs.put(drs_rule_key("vc", "domain-c7", record.name), msgspec.json.encode(record))
    await drs.put(drs_rule_key("vc", "domain-c7", "broken"), b"{not json")

    code, report = await cli.json("exposure")
    assert code == 0
    assert {w["name"]: w["drs_rule"] for w in report["workloads"]} == {
        "web": True,
        "api": False,
        "old": False,  # its rule is being removed
    }
    _, _, err = await cli("exposure")
    assert "DRS record rule.vc.domain-c7.broken skipped" in err


async def test_exposure_groups_by_a_label_set_given_by_flag(
    kube_double: KubeDouble, bus: Bus, cli: Cli
) -> None:
    await seed_kv_cluster(kube_double, bus, {"n1": "esx-a", "n2": "esx-a"})
    for index, node in enumerate(("n1", "n2")):
        pod = deployment_pod(index, node)
        del pod["metadata"]["ownerReferences"]
        kube_double.seed(pod)
    assert (await cli.json("exposure"))[1]["workloads"] == []  # bare pods have no owner
    _, report = await cli.json("exposure", "--label-set", "app")
    assert [(w["kind"], w["name"]) for w in report["workloads"]] == [("LabelSet", "app=web")]


LabelledCluster = Callable[[int], contextlib.AbstractAsyncContextManager[None]]


@pytest.fixture
def labelled_cluster(
    vcsim: VcsimFactory, kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> LabelledCluster:
    """`async with labelled_cluster(hosts):` see `labelled`."""
    return functools.partial(labelled, vcsim, kube_double, nats_server, kubeconfig)


@contextlib.asynccontextmanager
async def labelled(
    vcsim: VcsimFactory, kube: KubeDouble, nats: NatsServer, kubeconfig: Path, hosts: int
) -> AsyncIterator[None]:
    """vcsim with one node VM per host (node-1 on H0, ...), the labeller following it, and one
    replica of a host-anti-affine Deployment on each of the first three nodes."""
    vc = vcsim(hosts=hosts, vms=hosts)
    nodes = [f"node-{i}" for i in range(1, hosts + 1)]
    for name in nodes:
        kube.seed(node_object(name, status={"allocatable": ALLOCATABLE}))
    kube.seed(node_object("orphan"))  # no VM: the labeller cannot place it
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    for index, node in enumerate(nodes[:3]):
        kube.seed(deployment_pod(index, node, ANTI_HOST))
    async with running(labeller_config(vc, nats, kubeconfig)) as labeller:
        await wait_ready(labeller)
        await eventually(
            lambda: all(LABEL_ESXI_HOST in node_labels(kube, n) for n in nodes), "nodes labelled"
        )
        yield


@pytest.mark.parametrize(
    ("hosts", "exit_code", "moves", "rules"),
    [
        pytest.param(
            3, 1, [("shop/web-5d8f7-0", "unsatisfiable", "")], 1, id="3-hosts-unsatisfiable"
        ),
        pytest.param(4, 0, [("shop/web-5d8f7-0", "moves", "node-4")], 0, id="4-hosts-moves"),
    ],
)
async def test_what_if_maintenance_of_a_host_holding_one_anti_affine_replica(
    labelled_cluster: LabelledCluster,
    cli: Cli,
    hosts: int,
    exit_code: int,
    moves: list[tuple[str, str, str]],
    rules: int,
) -> None:
    async with labelled_cluster(hosts):
        code, report = await cli.json("what-if", "maintenance", "DC0_C0_H0")
        assert code == exit_code
        assert (report["hosts"], report["nodes"]) == (["DC0_C0_H0"], ["node-1"])
        assert [(m["pod"], m["verdict"], m["to_node"]) for m in report["moves"]] == moves
        assert report["ok"] is (exit_code == 0)
        assert [r["pod"] for r in report["unsatisfiable_rules"]] == ["shop/web-5d8f7-0"] * rules
        assert all(LABEL_ESXI_HOST in r["rule"] for r in report["unsatisfiable_rules"])
        code, out, _ = await cli("what-if", "maintenance", "DC0_C0_H0")
        assert code == exit_code
        verdict = "1 pod(s) would have nowhere to go" if rules else "every pod has somewhere to go"
        assert verdict in out


async def test_topology_from_the_labellers_placements(
    labelled_cluster: LabelledCluster, cli: Cli
) -> None:
    async with labelled_cluster(3):
        code, topology = await cli.json("topology")
        assert code == 0
        [datacenter] = topology["datacenters"]
        [cluster] = datacenter["clusters"]
        assert (datacenter["name"], cluster["name"]) == ("DC0", "DC0_C0")
        assert [(h["name"], [n["name"] for n in h["nodes"]]) for h in cluster["hosts"]] == [
            ("DC0_C0_H0", ["node-1"]), ("DC0_C0_H1", ["node-2"]), ("DC0_C0_H2", ["node-3"])
        ]  # fmt: skip
        assert {h["connection_state"] for h in cluster["hosts"]} == {"connected"}
        assert [n["pods"] for h in cluster["hosts"] for n in h["nodes"]] == [1, 1, 1]
        assert [n["name"] for n in topology["unplaced_nodes"]] == ["orphan"]
        code, out, _ = await cli("topology", "--cluster", "DC0_C0")
        assert "(no known ESXi host)" not in out
        assert "DC0_C0_H2" in out

        code, out, err = await cli("what-if", "maintenance", "no-such-host")
        assert code == 1
        assert "no ESXi host named no-such-host" in err


def launcher_pod(vmi: str, node: str) -> dict[str, Any]:
    """The virt-launcher pod KubeVirt runs a VMI in: owned by the VMI, labelled with its uid."""
    pod = deployment_pod(0, node, app="win")
    pod["metadata"] = {
        "name": f"virt-launcher-{vmi}-x7k2p",
        "namespace": "shop",
        "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": f"uid-{vmi}"},
        "ownerReferences": [
            {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": vmi,
             "uid": f"uid-{vmi}", "controller": True, "blockOwnerDeletion": True}
        ],
    }  # fmt: skip
    return pod


async def test_kubevirt_vmis_count_as_replicas_of_their_replica_set_and_move_by_name(
    kube_double: KubeDouble, bus: Bus, cli: Cli
) -> None:
    await seed_kv_cluster(kube_double, bus, {"n1": "esx-a", "n2": "esx-a", "n3": "esx-b"})
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
             "name": "win-pool", "uid": "uid-win-pool", "controller": True}  # fmt: skip
    for vmi, node in (("win-pool-a1", "n1"), ("win-pool-b2", "n2")):
        kube_double.seed(
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": {"name": vmi, "namespace": "shop", "ownerReferences": [owner]},
                "spec": {"domain": {"devices": {}}},
            }
        )
        kube_double.seed(launcher_pod(vmi, node))

    _, report = await cli.json("exposure")
    assert [(w["kind"], w["name"], w["on_worst_host"]) for w in report["workloads"]] == [
        ("VirtualMachineInstanceReplicaSet", "win-pool", 2)
    ]
    code, report = await cli.json("what-if", "maintenance", "esx-a.example.com")  # by full name
    assert code == 0
    assert [(m["vmi"], m["to_node"]) for m in report["moves"]] == [
        ("shop/win-pool-a1", "n3"),
        ("shop/win-pool-b2", "n3"),
    ]


def kubevirt_object(kind: str, name: str, owner: str | None, spec: dict[str, Any]) -> Any:
    """A KubeVirt object in `shop`, controlled by the VirtualMachine `owner` if given."""
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": f"uid-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": owner,
             "uid": f"uid-{owner}", "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    return {"apiVersion": "kubevirt.io/v1", "kind": kind, "metadata": meta, "spec": spec}


async def test_explain_shows_a_vm_placement_that_waits_for_a_restart(
    kube_double: KubeDouble, bus: Bus, cli: Cli
) -> None:
    """The VM's template now asks for SSD nodes; the running VMI (started before) has no
    nodeSelector, and KubeVirt holds the change for a restart (RestartRequired)."""
    await seed_kv_cluster(kube_double, bus, {"n1": "esx-a", "n2": "esx-b"})
    template = {"domain": {"devices": {}}, "nodeSelector": {"disk": "ssd"}}
    vm = kubevirt_object("VirtualMachine", "db", None,
                         {"runStrategy": "Always", "template": {"spec": template}})  # fmt: skip
    vm["status"] = {"conditions": [{"type": "RestartRequired", "status": "True"}]}
    kube_double.seed(vm)
    kube_double.seed(
        kubevirt_object("VirtualMachineInstance", "db", "db", {"domain": {"devices": {}}})
    )
    kube_double.seed(launcher_pod("db", "n1"))
    pod = "shop/virt-launcher-db-x7k2p"

    code, out, _ = await cli("explain", "pod", pod)
    assert code == 0
    assert "VirtualMachine shop/db: its new placement waits for a restart" in out
    assert 'nodeSelector: the template asks {"disk":"ssd"}; the running VMI has none' in out
    assert "virtctl restart db -n shop" in out
    _, report = await cli.json("explain", "pod", pod)
    assert report["concerned"] is True
    assert report["vm_restart"] == {
        "vm": "shop/db",
        "changes": [{"field": "nodeSelector", "template": '{"disk":"ssd"}', "running": "null"}],
    }

    # Restarted: the VMI has it and KubeVirt clears the condition; explain says nothing more.
    kube_double.seed({**vm, "status": {"conditions": []}})
    _, report = await cli.json("explain", "pod", pod)
    assert report["vm_restart"] is None


async def test_an_unreachable_bus_is_a_clear_error_after_the_timeout(
    kube_double: KubeDouble, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["topology", "--kubeconfig", str(kubeconfig), "--nats", "nats://127.0.0.1:9"]
    code = await asyncio.to_thread(exit_code, [*argv, "--timeout", "1"])
    assert code == 1
    assert "could not read the cluster and the topology KV within 1 s" in capsys.readouterr().err


async def test_topology_shows_the_failure_domains_hosts_have(
    kube_double: KubeDouble, bus: Bus, cli: Cli
) -> None:
    await seed_kv_cluster(kube_double, bus, {"n1": "esx-a", "n2": "esx-b"})
    code, out, _ = await cli("topology")
    assert code == 0
    assert "ZONE" not in out  # no host has one: no column
    topology = await bus.topology()
    for host, zone in (("esx-a", "zone-a"), ("esx-b", "zone-b")):
        await topology.put_host(msgspec.structs.replace(esxi_host(host), zone=zone, region="eu"))
    code, report = await cli.json("topology")
    assert code == 0
    hosts = report["datacenters"][0]["clusters"][0]["hosts"]
    assert [(h["region"], h["zone"], h["rack"]) for h in hosts] == [
        ("eu", "zone-a", ""), ("eu", "zone-b", "")
    ]  # fmt: skip
    code, out, _ = await cli("topology")
    assert code == 0
    header, first = out.splitlines()[:2]
    assert header.split()[:4] == ["DATACENTER", "REGION", "ZONE", "CLUSTER"]
    assert "RACK" not in header
    assert first.split()[:4] == ["DC0", "eu", "zone-a", "C0"]


async def test_hosts_of_two_vcenters_are_named_apart_in_what_if_and_topology(
    vcsim: VcsimFactory,
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    cli: Cli,
) -> None:
    """vcsim gives two vCenters the same host names and moids (DC0_C0_H0 is host-21 in both):
    a host is named `<vcenter>/<name>`, a bare name or moid that fits both is refused with the
    candidates, and maintenance of vc-b's host takes only vc-b's nodes."""
    parts = LabellerParts(vcsim, nats_server, kube_double, kubeconfig)
    two = parts.two_vcenters()
    for name in (*VC_A_NODES, *VC_B_NODES):  # `two_vcenters` seeded them without allocatable
        node = kube_double.read("v1", "nodes", name)
        assert node is not None
        node["status"] = {"allocatable": ALLOCATABLE}
        kube_double.write(node)
    on_h0 = {
        vcenter: sorted(n for n in names if host_of(si, n) == "DC0_C0_H0")
        for vcenter, si, names in (
            ("vc-a", two.admin_a, VC_A_NODES),
            ("vc-b", two.admin_b, VC_B_NODES),
        )
    }
    assert on_h0["vc-a"], on_h0
    assert on_h0["vc-b"], on_h0
    moid = host_by_name(two.admin_b, "DC0_C0_H0")._moId
    assert moid == host_by_name(two.admin_a, "DC0_C0_H0")._moId, "vcsim repeats moids"
    async with parts.labeller(two.a, vcenters=two.settings):
        for spelling in (moid, "DC0_C0_H0"):
            code, _, err = await cli("what-if", "maintenance", spelling)
            assert code == 1
            assert (
                f"{spelling} names 2 ESXi hosts: vc-a/DC0_C0_H0 ({moid}), vc-b/DC0_C0_H0 ({moid})"
            ) in err

        for spelling in ("vc-b/DC0_C0_H0", f"vc-b/{moid}"):
            code, report = await cli.json("what-if", "maintenance", spelling)
            assert (report["hosts"], report["nodes"]) == (["vc-b/DC0_C0_H0"], on_h0["vc-b"])
        code, out, _ = await cli("what-if", "maintenance", "vc-b/DC0_C0_H0")
        assert out.startswith(f"hosts vc-b/DC0_C0_H0: {len(on_h0['vc-b'])} nodes")

        code, report = await cli.json("what-if", "host-failure", "vc-a/DC0_C0_H0")
        assert (report["host"], report["vcenter"]) == ("vc-a/DC0_C0_H0", "vc-a")
        assert report["exposed"]["nodes"] == on_h0["vc-a"]

        code, out, _ = await cli("topology")
        rows = [line.split() for line in out.splitlines()[1:] if line.startswith("DC0")]
        hosts = {row[3] for row in rows}
        assert hosts == {
            "vc-a/DC0_C0_H0", "vc-a/DC0_C0_H1", "vc-a/DC0_C0_H2",
            "vc-b/DC0_C0_H0", "vc-b/DC0_C0_H1",
        }  # fmt: skip
