"""The drs-translator's vCenter adapter against our vcsim (govmomi 0.24): what it reads and writes.

vcsim's ReconfigureComputeResource_Task adds, edits (by name) and removes (rules by key, groups by
name) DRS rules and groups (simulator/cluster_compute_resource.go); a second add of a name is
refused with InvalidArgument, which is how a refused batch is exercised.
"""

from typing import Any

import pytest
from pyVmomi import vim

from hostaffinity.drs_translator.core.diff import Change
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules, ReconfigureRefused
from hostaffinity.runtime.kube.leader import LeaseLapsed
from hostaffinity.runtime.vcenter.session import VCenterSession
from tests.platform.vcsim import Vcsim, VcsimFactory


def inventory(si: vim.ServiceInstance, kind: type[Any]) -> dict[str, Any]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    return {obj.name: obj for obj in view.view}


def cluster_moid(vc: Vcsim) -> str:
    (cluster,) = inventory(vc.connect(), vim.ClusterComputeResource).values()
    return str(cluster._moId)


async def test_rules_and_groups_round_trip_and_an_edit_keeps_the_key(vcsim: VcsimFactory) -> None:
    vc = vcsim(hosts=3, vm_names=["node-0", "node-1", "node-2", "node-3"])
    si = vc.connect()
    vms = {name: vm._moId for name, vm in inventory(si, vim.VirtualMachine).items()}
    hosts = {name: h._moId for name, h in inventory(si, vim.HostSystem).items()}
    moid = cluster_moid(vc)
    anti = DrsObject(
        "hostaffinity-anti-1",
        "vm-anti-affinity",
        moid,
        vms=tuple(sorted([vms["node-0"], vms["node-1"]])),
    )
    vm_group = DrsObject("hostaffinity-vmgroup-1", "vm-group", moid, vms=(vms["node-2"],))
    host_group = DrsObject(
        "hostaffinity-hostgroup-1", "host-group", moid, hosts=(hosts["DC0_C0_H0"],)
    )
    vm_host = DrsObject(
        "hostaffinity-vmhost-1", "vm-host", moid, vm_group=vm_group.name, host_group=host_group.name
    )
    async with VCenterSession(vc.settings()) as session:
        config = ClusterRules(session)
        await config.reconfigure(
            moid, [Change("add", o) for o in (anti, vm_group, host_group, vm_host)]
        )
        assert config.calls["ReconfigureComputeResource_Task"] == 1
        read = await config.read(moid)
        assert {
            n: o.same_content(read[n])
            for n, o in ((o.name, o) for o in (anti, vm_group, host_group, vm_host))
        } == {
            anti.name: True,
            vm_group.name: True,
            host_group.name: True,
            vm_host.name: True,
        }
        key = read[anti.name].key
        assert key is not None
        wider = DrsObject(
            anti.name,
            "vm-anti-affinity",
            moid,
            key=key,
            vms=tuple(sorted([vms["node-0"], vms["node-1"], vms["node-2"]])),
        )
        await config.reconfigure(moid, [Change("edit", wider)])
        again = await config.read(moid)
        assert again[anti.name].vms == wider.vms
        assert again[anti.name].key == key
        await config.reconfigure(
            moid,
            [
                Change("remove", again[n])
                for n in (vm_host.name, anti.name, vm_group.name, host_group.name)
            ],
        )
        assert await config.read(moid) == {}


async def test_a_refused_batch_raises_with_vcenters_reason(vcsim: VcsimFactory) -> None:
    vc = vcsim(hosts=2, vms=2)
    moid = cluster_moid(vc)
    rule = DrsObject("hostaffinity-anti-x", "vm-anti-affinity", moid, vms=("vm-1", "vm-2"))
    async with VCenterSession(vc.settings()) as session:
        config = ClusterRules(session)
        await config.reconfigure(moid, [Change("add", rule)])
        with pytest.raises(ReconfigureRefused, match="InvalidArgument"):
            await config.reconfigure(moid, [Change("add", rule)])


async def test_no_reconfigure_leaves_a_replica_that_stopped_leading(vcsim: VcsimFactory) -> None:
    """The fence is asked in the session's thread right before the call: a replica that lost
    its Lease after deciding (held off the CPU, as the hour's soak saw) sends nothing."""
    vc = vcsim(hosts=2, vms=2)
    moid = cluster_moid(vc)
    rule = DrsObject("hostaffinity-anti-x", "vm-anti-affinity", moid, vms=("vm-1", "vm-2"))
    leading = [True]

    def ensure_leading() -> None:
        if not leading[0]:
            raise LeaseLapsed("replica-b no longer leads hostaffinity-drs-translator")

    async with VCenterSession(vc.settings()) as session:
        config = ClusterRules(session, ensure_leading=ensure_leading)
        leading[0] = False
        with pytest.raises(LeaseLapsed, match="no longer leads"):
            await config.reconfigure(moid, [Change("add", rule)])
        assert config.calls["ReconfigureComputeResource_Task"] == 0
        assert await config.read(moid) == {}
        leading[0] = True
        await config.reconfigure(moid, [Change("add", rule)])
        assert set(await config.read(moid)) == {rule.name}
