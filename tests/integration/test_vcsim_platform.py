"""What our vcsim (govmomi 0.24) does, seen from pyVmomi: the facts the node-labeller relies on.

These tests document the simulator and catch a bad build: the inventory shape and the awkward
cases main.go adds, the UUIDs a node is matched by, a relocation reported by WaitForUpdatesEx (to
one session's default collector only), and the things vcsim 0.24 does not do (MigrateVM_Task,
renaming a host, reporting maintenance mode or UUID changes to a property collector).
"""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pyVim.task import WaitForTask
from pyVmomi import vim, vmodl

from tests.platform.vcsim import VcsimError, VcsimFactory

_vim: Any = vim

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PC = vmodl.query.PropertyCollector


def by_name(si: vim.ServiceInstance, kind: type[Any]) -> dict[str, Any]:
    """Every managed object of `kind` in the inventory, by name."""
    content = si.RetrieveContent()
    assert content.viewManager is not None
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    try:
        return {obj.name: obj for obj in view.view}
    finally:
        view.DestroyView()


def task_result(task: vim.Task) -> Any:
    """Wait for a task; pyVmomi raises its fault if it failed."""
    return WaitForTask(task)  # type: ignore[no-untyped-call]  # pyVim.task is unannotated


class Watch:
    """A property collector with one filter over all VMs and hosts, as the node-labeller uses:
    one of its own, or (`own_collector=False`) the session's default one."""

    VM_PATHS = ("runtime.host", "config.uuid")
    HOST_PATHS = ("name", "runtime.inMaintenanceMode")

    def __init__(self, si: vim.ServiceInstance, *, own_collector: bool = True) -> None:
        content = si.RetrieveContent()
        assert content.viewManager is not None
        self.view = content.viewManager.CreateContainerView(
            content.rootFolder, [vim.VirtualMachine, vim.HostSystem], True
        )
        self.own_collector = own_collector
        self.collector = (
            content.propertyCollector.CreatePropertyCollector()
            if own_collector
            else content.propertyCollector
        )
        traverse = PC.TraversalSpec(name="view", type=vim.view.ContainerView, path="view")
        spec = PC.FilterSpec(
            objectSet=[PC.ObjectSpec(obj=self.view, skip=True, selectSet=[traverse])],
            propSet=[
                PC.PropertySpec(type=vim.VirtualMachine, pathSet=list(self.VM_PATHS)),
                PC.PropertySpec(type=vim.HostSystem, pathSet=list(self.HOST_PATHS)),
            ],
        )
        self.collector.CreateFilter(spec, partialUpdates=True)
        first = self.collector.WaitForUpdatesEx("", PC.WaitOptions(maxWaitSeconds=5))
        assert first is not None, "the first call returns the current state"
        self.initial = self.changes_of(first)
        self.version: str = first.version

    def next(self, max_wait_seconds: int = 5) -> list[tuple[str, str, Any]]:
        """The (moid, property, value) changes of the next update set; [] when none came."""
        update = self.collector.WaitForUpdatesEx(
            self.version, PC.WaitOptions(maxWaitSeconds=max_wait_seconds)
        )
        if update is None:
            return []
        self.version = update.version
        return self.changes_of(update)

    @staticmethod
    def changes_of(update: Any) -> list[tuple[str, str, Any]]:
        return [
            (obj.obj._moId, change.name, getattr(change.val, "_moId", change.val))
            for filter_update in update.filterSet
            for obj in filter_update.objectSet
            for change in obj.changeSet
        ]

    def close(self) -> None:
        if self.own_collector:
            self.collector.DestroyPropertyCollector()
        self.view.DestroyView()


@pytest.fixture
def small(vcsim: VcsimFactory) -> vim.ServiceInstance:
    """Two clusters of two hosts, four VMs: one VM per host."""
    return vcsim(clusters=2, hosts=2, vms=4).connect()


@pytest.fixture
def watch(small: vim.ServiceInstance) -> Iterator[Watch]:
    w = Watch(small)
    yield w
    w.close()


def test_inventory_has_the_asked_shape(vcsim: VcsimFactory) -> None:
    si = vcsim(clusters=2, hosts=2, vms=5).connect()

    clusters = by_name(si, vim.ClusterComputeResource)
    hosts = by_name(si, vim.HostSystem)
    vms = by_name(si, vim.VirtualMachine)

    assert {name: sorted(h.name for h in c.host) for name, c in clusters.items()} == {
        "DC0_C0": ["DC0_C0_H0", "DC0_C0_H1"],
        "DC0_C1": ["DC0_C1_H0", "DC0_C1_H1"],
    }
    host_names = sorted(hosts)
    assert sorted(vms) == [f"node-{i}" for i in range(1, 6)]
    for i in range(5):
        vm = vms[f"node-{i + 1}"]
        assert vm.runtime.powerState == vim.VirtualMachine.PowerState.poweredOn
        assert vm.runtime.host.name == host_names[i % 4], "VMs go round-robin over the hosts"
    assert not any(h.runtime.inMaintenanceMode for h in hosts.values())


def test_vm_names_replace_the_prefix(vcsim: VcsimFactory) -> None:
    si = vcsim(vm_names=["cp-0.example.com", "worker-a"]).connect()

    assert sorted(by_name(si, vim.VirtualMachine)) == ["cp-0.example.com", "worker-a"]


def test_every_vm_has_a_bios_and_an_instance_uuid(small: vim.ServiceInstance) -> None:
    vms = by_name(small, vim.VirtualMachine).values()

    for vm in vms:
        assert UUID.match(vm.config.uuid), vm.config.uuid
        assert UUID.match(vm.config.instanceUuid), vm.config.instanceUuid
        assert vm.summary.config.uuid == vm.config.uuid
        assert vm.summary.config.instanceUuid == vm.config.instanceUuid
        assert vm.config.uuid != vm.config.instanceUuid
    assert len({vm.config.uuid for vm in vms}) == len(vms)
    assert len({vm.config.instanceUuid for vm in vms}) == len(vms)


def test_duplicate_uuid_gives_the_second_vm_the_first_ones_bios_uuid(
    vcsim: VcsimFactory,
) -> None:
    si = vcsim(vms=3, duplicate_uuid=[("node-1", "node-3")]).connect()
    vms = by_name(si, vim.VirtualMachine)

    assert vms["node-3"].config.uuid == vms["node-1"].config.uuid
    assert vms["node-3"].summary.config.uuid == vms["node-1"].config.uuid
    assert vms["node-3"].config.instanceUuid != vms["node-1"].config.instanceUuid
    assert vms["node-2"].config.uuid != vms["node-1"].config.uuid


def test_rename_host_gives_a_name_that_is_no_label_value(vcsim: VcsimFactory) -> None:
    new_name = "ESXi 01 (rack A)"
    si = vcsim(hosts=2, vms=2, rename_host={"DC0_C0_H0": new_name}).connect()
    hosts = by_name(si, vim.HostSystem)
    vms = by_name(si, vim.VirtualMachine)

    assert sorted(hosts) == ["DC0_C0_H1", new_name]
    assert hosts[new_name].summary.config.name == new_name
    assert vms["node-1"].runtime.host.name == new_name


def test_vcsim_cannot_rename_a_host_through_the_api(small: vim.ServiceInstance) -> None:
    """Why main.go renames hosts inside the simulator: HostSystem has no Rename_Task in 0.24."""
    host = by_name(small, vim.HostSystem)["DC0_C0_H0"]

    with pytest.raises(vmodl.fault.MethodNotFound):
        host.Rename_Task("renamed")


def test_maintenance_puts_the_host_in_maintenance_mode_from_the_start(
    vcsim: VcsimFactory,
) -> None:
    si = vcsim(hosts=3, vms=3, maintenance=["DC0_C0_H1"]).connect()
    hosts = by_name(si, vim.HostSystem)

    assert {name: h.runtime.inMaintenanceMode for name, h in hosts.items()} == {
        "DC0_C0_H0": False,
        "DC0_C0_H1": True,
        "DC0_C0_H2": False,
    }


def test_relocate_with_a_host_moves_the_vm_and_wait_for_updates_reports_it(
    small: vim.ServiceInstance, watch: Watch
) -> None:
    vms = by_name(small, vim.VirtualMachine)
    hosts = by_name(small, vim.HostSystem)
    vm, target = vms["node-1"], hosts["DC0_C1_H1"]
    assert (vm._moId, "runtime.host", hosts["DC0_C0_H0"]._moId) in watch.initial

    task_result(vm.RelocateVM_Task(vim.vm.RelocateSpec(host=target)))

    assert vm.runtime.host == target
    assert vm.summary.runtime.host == target
    assert watch.next() == [(vm._moId, "runtime.host", target._moId)]


def test_maintenance_and_uuid_changes_are_not_reported_to_property_collectors(
    small: vim.ServiceInstance, watch: Watch
) -> None:
    """vcsim 0.24 sets these fields without telling collectors; a relocation, which it does
    report, shows the filter works. A test that needs a host in maintenance mode starts vcsim
    with it (`maintenance=`), or re-reads after EnterMaintenanceMode_Task."""
    vms = by_name(small, vim.VirtualMachine)
    hosts = by_name(small, vim.HostSystem)
    host = hosts["DC0_C1_H0"]

    task_result(host.EnterMaintenanceMode_Task(timeout=0))
    task_result(vms["node-2"].ReconfigVM_Task(vim.vm.ConfigSpec(uuid=vms["node-1"].config.uuid)))
    task_result(vms["node-4"].RelocateVM_Task(vim.vm.RelocateSpec(host=hosts["DC0_C0_H0"])))

    assert host.runtime.inMaintenanceMode is True, "a fresh read sees the change"
    assert vms["node-2"].config.uuid == vms["node-1"].config.uuid
    assert watch.next() == [(vms["node-4"]._moId, "runtime.host", hosts["DC0_C0_H0"]._moId)]


def test_only_the_last_session_watching_with_its_default_collector_hears_changes(
    vcsim: VcsimFactory,
) -> None:
    """Each session's default PropertyCollector has the moref `propertyCollector`, and vcsim
    0.24 keeps one change handler per moref, set by WaitForUpdatesEx from version "": the
    session that started watching last takes the changes from the others
    (simulator/property_collector.go WaitForUpdatesEx, registry.go AddHandler). A collector of
    its own (CreatePropertyCollector, as `Watch` here) has a moref of its own."""
    vc = vcsim(clusters=1, hosts=2, vms=2)
    mover = vc.connect()
    first, last = (Watch(vc.connect(), own_collector=False) for _ in range(2))
    own = Watch(vc.connect())
    vm = by_name(mover, vim.VirtualMachine)["node-1"]
    target = by_name(mover, vim.HostSystem)["DC0_C0_H1"]

    task_result(vm.RelocateVM_Task(vim.vm.RelocateSpec(host=target)))

    assert first.next(max_wait_seconds=1) == []
    assert last.next() == [(vm._moId, "runtime.host", target._moId)]
    assert own.next() == [(vm._moId, "runtime.host", target._moId)]


def test_vcsim_does_not_implement_migrate_vm_or_disconnect_host(
    small: vim.ServiceInstance,
) -> None:
    vm = by_name(small, vim.VirtualMachine)["node-1"]
    host = by_name(small, vim.HostSystem)["DC0_C1_H1"]

    with pytest.raises(vmodl.fault.MethodNotFound):
        vm.MigrateVM_Task(host=host, priority=vim.VirtualMachine.MovePriority.defaultPriority)
    with pytest.raises(vmodl.fault.MethodNotFound):
        host.DisconnectHost_Task()


def test_vcsim_checks_the_password(vcsim: VcsimFactory) -> None:
    vc = vcsim(vms=1)
    vc.password = "wrong"

    with pytest.raises(vim.fault.InvalidLogin):
        vc.connect()


def test_a_bad_inventory_request_fails_with_vcsims_own_message(vcsim: VcsimFactory) -> None:
    with pytest.raises(VcsimError, match=r"(?s)exited with 1.*no host \"no-such-host\""):
        vcsim(maintenance=["no-such-host"])


def test_reconfigure_applies_das_config_merging_options_by_key(
    small: vim.ServiceInstance,
) -> None:
    """Our vcsim applies ClusterConfigSpecEx.dasConfig (govmomi 0.24's ignores it): with modify
    set fields replace and advanced options merge by key, without it the whole dasConfig goes."""
    cluster = next(iter(by_name(small, vim.ClusterComputeResource).values()))
    assert cluster.configurationEx.dasConfig.enabled is None  # HA never configured

    def reconfigure(modify: bool, **das: Any) -> Any:
        spec = _vim.cluster.ConfigSpecEx(dasConfig=_vim.cluster.DasConfigInfo(**das))
        task_result(cluster.ReconfigureComputeResource_Task(spec=spec, modify=modify))
        return cluster.configurationEx.dasConfig

    def option(key: str, value: str) -> Any:
        return _vim.option.OptionValue(key=key, value=value)

    das = reconfigure(
        True,
        enabled=True,
        admissionControlEnabled=True,
        admissionControlPolicy=_vim.cluster.FailoverLevelAdmissionControlPolicy(failoverLevel=1),
        option=[option("das.respectVmVmAntiAffinityRules", "true"), option("das.x", "1")],
    )
    assert (das.enabled, das.admissionControlEnabled, das.admissionControlPolicy.failoverLevel) == (
        True,
        True,
        1,
    )
    das = reconfigure(True, option=[option("das.respectVmVmAntiAffinityRules", "false")])
    assert das.enabled is True
    assert [(o.key, o.value) for o in das.option] == [
        ("das.respectVmVmAntiAffinityRules", "false"),
        ("das.x", "1"),
    ]
    das = reconfigure(False, enabled=False)
    assert (das.enabled, das.admissionControlPolicy, list(das.option)) == (False, None, [])
