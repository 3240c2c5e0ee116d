"""The campaign's probe reads vCenter in one property collector call per probe, over one
container view per session (a view is a server object until destroyed, and an hour's soak
probes 3600 times): the same figures as the final snapshot's reads, as vCenter changes."""

from __future__ import annotations

from typing import Any

from pyVmomi import vim

from tests.campaign.probe import VcenterView
from tests.campaign.snapshot import drs_state, vcenter_truth
from tests.e2e.harness import finished, inventory
from tests.platform.vcsim import VcsimFactory


def test_the_probe_reads_what_the_snapshot_reads_through_one_view(vcsim: VcsimFactory) -> None:
    si = vcsim(clusters=2, hosts=3, vms=6).connect()
    vms = sorted(inventory(si, vim.VirtualMachine), key=lambda vm: vm.name)
    same_cluster = [vm for vm in vms if vm.runtime.host.parent == vms[0].runtime.host.parent]
    cluster = vms[0].runtime.host.parent
    add_rule_to = [vm._moId for vm in same_cluster[:2]]
    moved = same_cluster[0]
    target = next(h for h in cluster.host if h != moved.runtime.host)
    finished(moved.RelocateVM_Task(vim.vm.RelocateSpec(host=target)))
    view = VcenterView()

    truth, drs = view.state(si)

    assert truth == vcenter_truth(si)
    assert truth[moved.name][0] == target._moId
    assert drs == drs_state(si)
    assert set(drs) == {c._moId for c in inventory(si, vim.ClusterComputeResource)}
    assert drs[cluster._moId] == {}
    with_rule = _with_rule(si, cluster, add_rule_to)
    assert view.state(si)[1][cluster._moId] == with_rule


def _with_rule(
    si: vim.ServiceInstance, cluster: vim.ClusterComputeResource, vms: list[str]
) -> dict[str, Any]:
    spec = vim.cluster.ConfigSpecEx(
        rulesSpec=[
            vim.cluster.RuleSpec(
                operation="add",
                info=vim.cluster.AntiAffinityRuleSpec(
                    name="admin-rule-1",
                    enabled=True,
                    vm=[vim.VirtualMachine(moid, si._stub) for moid in vms],
                ),
            )
        ]
    )
    finished(cluster.ReconfigureComputeResource_Task(spec=spec, modify=True))
    return drs_state(si)[cluster._moId]
