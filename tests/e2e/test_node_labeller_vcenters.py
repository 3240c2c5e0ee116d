"""node-labeller with two vCenters (two vcsim instances): nodes of both labelled, host records
kept apart although the moids repeat, one BIOS UUID in both reported, never guessed, and one
vCenter away a degraded part of readiness, not "not ready"."""

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from pyVmomi import vim

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    EsxiHost,
    NodePlaced,
    NodePlacement,
    NodeUnmatched,
    VmMoved,
)
from tests.e2e.harness import FAST_LEASE, finished, inventory
from tests.e2e.labeller_harness import (
    VC_A_NODES,
    VC_B_NODES,
    LabellerParts,
    eventually,
    node_labels,
    node_object,
    relocate,
    stream_events,
    vm_by_name,
)
from tests.integration.cli_runner import Cli


def host_of(si: vim.ServiceInstance, vm_name: str) -> str:
    return str(vm_by_name(si, vm_name).runtime.host.name)


async def test_nodes_of_two_vcenters_are_labelled_and_their_hosts_kept_apart(
    parts: LabellerParts, bus: Bus
) -> None:
    two = parts.two_vcenters()
    async with parts.labeller(two.a, vcenters=two.settings):
        for si, names in ((two.admin_a, VC_A_NODES), (two.admin_b, VC_B_NODES)):
            for name in names:
                assert node_labels(parts.kube, name)[LABEL_ESXI_HOST] == host_of(si, name)

        snapshot = await (await bus.topology()).snapshot()
        named = {name: "vc-a" for name in VC_A_NODES} | {name: "vc-b" for name in VC_B_NODES}
        for name, vcenter in named.items():
            placement = snapshot.nodes[name]
            assert isinstance(placement, NodePlacement)
            assert placement.vcenter == vcenter
        moids = {
            vcenter: {str(host._moId) for host in inventory(si, vim.HostSystem)}
            for vcenter, si in (("vc-a", two.admin_a), ("vc-b", two.admin_b))
        }
        assert moids["vc-a"] & moids["vc-b"], "vcsim repeats host moids"
        # With several vCenters, `host.<vcenter>.<moid>`: one record per host of each.
        expected = {f"{vcenter}.{moid}" for vcenter, found in moids.items() for moid in found}
        assert set(snapshot.hosts) == expected
        for key, host in snapshot.hosts.items():
            assert isinstance(host, EsxiHost)
            assert key == f"{host.vcenter}.{host.moid}"

        # A vMotion in vc-b is followed while vc-a's nodes stay where they are.
        target = next(h for h in ("DC0_C0_H0", "DC0_C0_H1") if h != host_of(two.admin_b, "b1"))
        await asyncio.to_thread(relocate, two.admin_b, "b1", target)
        await eventually(
            lambda: node_labels(parts.kube, "b1")[LABEL_ESXI_HOST] == target,
            "b1 relabelled after its vMotion in vc-b",
        )
        for name in VC_A_NODES:
            assert node_labels(parts.kube, name)[LABEL_ESXI_HOST] == host_of(two.admin_a, name)

    events = await stream_events(bus)
    placed = {e.node: e.vcenter for e in events if isinstance(e, NodePlaced)}
    assert placed == named
    (moved,) = [e for e in events if isinstance(e, VmMoved)]
    assert (moved.node, moved.vcenter, moved.to_host_name) == ("b1", "vc-b", target)


async def test_one_bios_uuid_in_two_vcenters_is_reported_and_the_node_left_unlabelled(
    parts: LabellerParts, bus: Bus
) -> None:
    two = parts.two_vcenters(nodes=())
    uuid = vm_by_name(two.admin_a, "a1").config.uuid
    clone = vm_by_name(two.admin_b, "b1")
    finished(clone.ReconfigVM_Task(spec=vim.vm.ConfigSpec(uuid=uuid)))
    assert clone.config.uuid == uuid  # as a VM copied between vCenters keeps it
    parts.kube.seed(node_object("a1", spec={"providerID": f"vsphere://{uuid}"}))
    parts.kube.seed(node_object("a2"))
    async with parts.labeller(two.a, vcenters=two.settings):
        assert LABEL_ESXI_HOST not in node_labels(parts.kube, "a1")
        assert node_labels(parts.kube, "a2")[LABEL_ESXI_HOST] == host_of(two.admin_a, "a2")
        assert await (await bus.topology()).get_node("a1") is None

    unmatched = [e for e in await stream_events(bus) if isinstance(e, NodeUnmatched)]
    (report,) = [e for e in unmatched if e.node == "a1"]
    assert sorted(zip(report.candidate_vcenters, report.candidates, strict=True)) == [
        ("vc-a", vm_by_name(two.admin_a, "a1")._moId),
        ("vc-b", clone._moId),
    ]
    assert "2 VMs share the BIOS UUID" in report.reason
    assert " in vc-a, " in report.reason
    assert " in vc-b)" in report.reason


async def test_one_vcenter_away_leaves_the_labeller_ready_and_says_which(
    parts: LabellerParts, capsys: pytest.CaptureFixture[str]
) -> None:
    """vc-b dies: /readyz stays 200 throughout and names vc-b degraded, as do the metric and
    `hostaffinity status`, while vMotions in vc-a are still labelled."""
    two = parts.two_vcenters()
    async with parts.labeller(two.a, vcenters=two.settings) as replica:
        health = f"http://127.0.0.1:{replica.runner.health.port}"
        await asyncio.to_thread(two.b.stop)
        away = "[~] vcenter connected: vc-b: away since "
        async with aiohttp.ClientSession() as http:
            answers: list[tuple[int, str]] = []

            async def readyz() -> tuple[int, str]:
                async with http.get(f"{health}/readyz") as response:
                    answers.append((response.status, await response.text()))
                return answers[-1]

            deadline = time.monotonic() + 20
            while away not in (await readyz())[1]:
                assert time.monotonic() < deadline, answers[-1]
                await asyncio.sleep(0.05)
            text = answers[-1][1]
            assert text.startswith("ready, degraded: vcenter connected: vc-b\n")
            assert "[+] vcenter connected: vc-a\n" in text
            # vc-a is still followed, and readiness never dropped meanwhile.
            target = next(h for h in ("DC0_C0_H1", "DC0_C0_H2") if h != host_of(two.admin_a, "a1"))
            await asyncio.to_thread(relocate, two.admin_a, "a1", target)
            moved = time.monotonic()
            while node_labels(parts.kube, "a1")[LABEL_ESXI_HOST] != target:
                assert time.monotonic() - moved < 10, "a1 not relabelled"
                await readyz()
                await asyncio.sleep(0.05)
            for _ in range(20):
                await readyz()
                await asyncio.sleep(0.05)
            assert {code for code, _ in answers} == {200}
            async with http.get(f"{health}/metrics") as response:
                metrics = await response.text()
        degraded = 'hostaffinity_readiness_degraded{check="vcenter connected: vc-b"} 1.0'
        assert degraded in metrics
        assert 'hostaffinity_readiness_degraded{check="vcenter connected: vc-a"} 0.0' in metrics

        cli = Cli(parts.kubeconfig, parts.nats, capsys)
        sentence = "node-labeller: vcenter connected: vc-b is degraded (away since "
        report: dict[str, Any] = {}

        async def status_names_it() -> bool:
            nonlocal report
            _, report = await cli.json("status", "--namespace", FAST_LEASE.namespace)
            return any(p.startswith(sentence) for p in report["problems"])

        deadline = time.monotonic() + 10
        while not await status_names_it():
            assert time.monotonic() < deadline, report["problems"]
        (labeller,) = [s for s in report["services"] if s["service"] == "node-labeller"]
        assert labeller["readiness"] == "degraded"
        assert [p["name"] for p in labeller["readiness_parts"]] == ["vcenter connected: vc-b"]
        code, out, _ = await cli("status", "--namespace", FAST_LEASE.namespace)
        assert code == 1
        (row,) = [line for line in out.splitlines() if line.startswith("node-labeller")]
        assert "degraded" in row
        assert f"  - {sentence}" in out
