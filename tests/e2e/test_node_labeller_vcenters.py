"""node-labeller with two vCenters (two vcsim instances): nodes of both labelled, host records
kept apart although the moids repeat, and one BIOS UUID in both reported, never guessed."""

import asyncio
from pathlib import Path

from pyVmomi import vim

from hostaffinity.runtime.bus import Bus
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
    eventually,
    labeller_config,
    node_labels,
    node_object,
    relocate,
    running,
    stream_events,
    vm_by_name,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import Vcsim, VcsimFactory

A_NODES = ["a-node-1", "a-node-2", "a-node-3"]
B_NODES = ["b-node-1", "b-node-2"]


def two_vcenters(vcsim: VcsimFactory) -> tuple[Vcsim, Vcsim]:
    """vc-a with three hosts and three node VMs, vc-b with two of each; vcsim gives both the
    same moids (`host-...`, `vm-...`), as two real vCenters may."""
    return vcsim(hosts=3, vms=3, vm_prefix="a-node-"), vcsim(hosts=2, vms=2, vm_prefix="b-node-")


def host_of(si: vim.ServiceInstance, vm_name: str) -> str:
    return str(vm_by_name(si, vm_name).runtime.host.name)


async def test_nodes_of_two_vcenters_are_labelled_and_their_hosts_kept_apart(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc_a, vc_b = two_vcenters(vcsim)
    admin_a, admin_b = vc_a.connect(), vc_b.connect()
    for name in A_NODES + B_NODES:
        kube_double.seed(node_object(name))
    vcenters = [vc_a.settings(name="vc-a"), vc_b.settings(name="vc-b")]
    config = labeller_config(vc_a, nats_server, kubeconfig, vcenters=vcenters)
    async with running(config) as service:
        await wait_ready(service)
        for si, names in ((admin_a, A_NODES), (admin_b, B_NODES)):
            for name in names:
                assert node_labels(kube_double, name)[LABEL_ESXI_HOST] == host_of(si, name)

        snapshot = await (await bus.topology()).snapshot()
        named = {name: "vc-a" for name in A_NODES} | {name: "vc-b" for name in B_NODES}
        for name, vcenter in named.items():
            placement = snapshot.nodes[name]
            assert isinstance(placement, NodePlacement)
            assert placement.vcenter == vcenter
        moids = {
            vcenter: {str(host._moId) for host in inventory(si, vim.HostSystem)}
            for vcenter, si in (("vc-a", admin_a), ("vc-b", admin_b))
        }
        assert moids["vc-a"] & moids["vc-b"], "vcsim repeats host moids"
        # With several vCenters, `host.<vcenter>.<moid>`: one record per host of each.
        expected = {f"{vcenter}.{moid}" for vcenter, found in moids.items() for moid in found}
        assert set(snapshot.hosts) == expected
        for key, host in snapshot.hosts.items():
            assert isinstance(host, EsxiHost)
            assert key == f"{host.vcenter}.{host.moid}"

        # A vMotion in vc-b is followed while vc-a's nodes stay where they are.
        target = next(h for h in ("DC0_C0_H0", "DC0_C0_H1") if h != host_of(admin_b, "b-node-1"))
        await asyncio.to_thread(relocate, admin_b, "b-node-1", target)
        await eventually(
            lambda: node_labels(kube_double, "b-node-1")[LABEL_ESXI_HOST] == target,
            "b-node-1 relabelled after its vMotion in vc-b",
        )
        for name in A_NODES:
            assert node_labels(kube_double, name)[LABEL_ESXI_HOST] == host_of(admin_a, name)

    events = await stream_events(bus)
    placed = {e.node: e.vcenter for e in events if isinstance(e, NodePlaced)}
    assert placed == {name: "vc-a" for name in A_NODES} | {name: "vc-b" for name in B_NODES}
    (moved,) = [e for e in events if isinstance(e, VmMoved)]
    assert (moved.node, moved.vcenter, moved.to_host_name) == ("b-node-1", "vc-b", target)


async def test_one_bios_uuid_in_two_vcenters_is_reported_and_the_node_left_unlabelled(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc_a, vc_b = two_vcenters(vcsim)
    admin_a, admin_b = vc_a.connect(), vc_b.connect()
    uuid = vm_by_name(admin_a, "a-node-1").config.uuid
    clone = vm_by_name(admin_b, "b-node-1")
    finished(clone.ReconfigVM_Task(spec=vim.vm.ConfigSpec(uuid=uuid)))
    assert clone.config.uuid == uuid  # as a VM copied between vCenters keeps it
    kube_double.seed(node_object("a-node-1", spec={"providerID": f"vsphere://{uuid}"}))
    kube_double.seed(node_object("a-node-2"))
    vcenters = [vc_a.settings(name="vc-a"), vc_b.settings(name="vc-b")]
    config = labeller_config(vc_a, nats_server, kubeconfig, vcenters=vcenters)
    async with running(config) as service:
        await wait_ready(service)
        assert LABEL_ESXI_HOST not in node_labels(kube_double, "a-node-1")
        assert node_labels(kube_double, "a-node-2")[LABEL_ESXI_HOST] == host_of(admin_a, "a-node-2")
        assert await (await bus.topology()).get_node("a-node-1") is None

    unmatched = [e for e in await stream_events(bus) if isinstance(e, NodeUnmatched)]
    (report,) = [e for e in unmatched if e.node == "a-node-1"]
    assert sorted(zip(report.candidate_vcenters, report.candidates, strict=True)) == [
        ("vc-a", vm_by_name(admin_a, "a-node-1")._moId),
        ("vc-b", clone._moId),
    ]
    assert "2 VMs share the BIOS UUID" in report.reason
    assert " in vc-a, " in report.reason
    assert " in vc-b)" in report.reason
