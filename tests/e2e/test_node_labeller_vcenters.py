"""node-labeller with two vCenters (two vcsim instances): nodes of both labelled, host records
kept apart although the moids repeat, and one BIOS UUID in both reported, never guessed."""

import asyncio

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
from tests.e2e.harness import finished, inventory
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
