"""What the benches read from and do to vcsim with a plain pyVmomi client, at any inventory size:
the whole placement in one PropertyCollector read, a vMotion timed by its task, and vcsim's own
floor (a bare RelocateVM_Task until a plain WaitForUpdatesEx client sees it), also with the
node-labeller's filters."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyVmomi import vim, vmodl

from hostaffinity.node_labeller.core.inventory import watched_properties
from hostaffinity.node_labeller.vcenter_watch import feed_properties, inventory_filter_spec
from tests.platform.vcsim import updates_followed

_COLLECTOR = vmodl.query.PropertyCollector


@dataclass(frozen=True)
class Placement:
    """vcsim's inventory as a table: VM name → moid and host moid, host moid → name, cluster."""

    vm: dict[str, str]
    vm_host: dict[str, str]
    host_name: dict[str, str]
    host_cluster: dict[str, str]

    def hosts_of_cluster(self, cluster: str) -> list[str]:
        return sorted(h for h, c in self.host_cluster.items() if c == cluster)


def _view_spec(si: Any, kind: type, paths: list[str]) -> Any:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    return _COLLECTOR.FilterSpec(
        objectSet=[
            _COLLECTOR.ObjectSpec(
                obj=view,
                skip=True,
                selectSet=[_COLLECTOR.TraversalSpec(path="view", type=vim.view.ContainerView)],
            )
        ],
        propSet=[_COLLECTOR.PropertySpec(type=kind, pathSet=paths)],
    )


def _retrieve(si: Any, kind: type, paths: list[str]) -> dict[str, dict[str, Any]]:
    """moid → {path: value} of every object of `kind`, read in pages of 1,000."""
    collector = si.RetrieveContent().propertyCollector
    result = collector.RetrievePropertiesEx(
        [_view_spec(si, kind, paths)], _COLLECTOR.RetrieveOptions(maxObjects=1000)
    )
    found: dict[str, dict[str, Any]] = {}
    while result is not None:
        for obj in result.objects:
            found[obj.obj._moId] = {prop.name: prop.val for prop in obj.propSet}
        if not result.token:
            break
        result = collector.ContinueRetrievePropertiesEx(result.token)
    return found


def read_placement(si: Any) -> Placement:
    """Every VM's host and every host's cluster, in two reads (not two calls per VM)."""
    vms = _retrieve(si, vim.VirtualMachine, ["name", "runtime.host"])
    hosts = _retrieve(si, vim.HostSystem, ["name", "parent"])
    return Placement(
        vm={props["name"]: moid for moid, props in vms.items()},
        vm_host={props["name"]: props["runtime.host"]._moId for props in vms.values()},
        host_name={moid: props["name"] for moid, props in hosts.items()},
        host_cluster={moid: props["parent"]._moId for moid, props in hosts.items()},
    )


def relocate(si: Any, vm_moid: str, host_moid: str) -> float:
    """vMotion a VM to a host of its cluster; the task's completeTime as epoch seconds. vcsim
    0.24 finishes a task before it answers the call, so one read of its info is enough."""
    vm = vim.VirtualMachine(vm_moid, si._stub)
    task = vm.RelocateVM_Task(vim.vm.RelocateSpec(host=vim.HostSystem(host_moid, si._stub)))
    info = task.info
    while info.state not in ("success", "error"):
        time.sleep(0.001)
        info = task.info
    if info.state != "success":
        raise RuntimeError(f"RelocateVM_Task of {vm_moid}: {info.error}")
    return float(info.completeTime.timestamp())


def simulator_floor(
    watcher_si: Any, mover_si: Any, moves: Sequence[tuple[str, str]], spec: Any = None
) -> list[float]:
    """Per (VM moid, host moid) move: seconds from the RelocateVM_Task's completeTime until a
    bare WaitForUpdatesEx client sees the VM change. The client watches `runtime.host` of every
    VM, or `spec` (a filter spec made on `watcher_si`, e.g. the node-labeller's). govmomi 0.24's
    simulator gathers updates on a 250 ms ticker and collects the filter's objects again for
    each change (simulator/property_collector.go, WaitForUpdatesEx and apply), so this is the
    floor any client of that filter sees (it grows with what the filter covers)."""
    collector = watcher_si.RetrieveContent().propertyCollector
    if spec is None:
        spec = _view_spec(watcher_si, vim.VirtualMachine, ["runtime.host"])
    collector.CreateFilter(spec, partialUpdates=False)
    options = _COLLECTOR.WaitOptions(maxWaitSeconds=5)
    update = collector.WaitForUpdatesEx("", options)
    while update.truncated:  # a big first read comes in parts
        update = collector.WaitForUpdatesEx(update.version, options)
    version = update.version
    delays = []
    for vm, host in moves:
        completed = relocate(mover_si, vm, host)
        while True:
            update = collector.WaitForUpdatesEx(version, options)
            if update is None:
                continue
            version = update.version
            if vm in _moids(update):
                break
        delays.append(time.time() - completed)
    return delays


def _moids(update_set: Any) -> set[str]:
    return {
        change.obj._moId
        for filter_update in update_set.filterSet or []
        for change in filter_update.objectSet or []
    }


@contextmanager
def following(si: Any, spec: Any) -> Iterator[None]:
    """A WaitForUpdatesEx loop on `spec` kept going on a thread, on a collector of its own (as
    a watcher's other feed is), while the body runs."""
    collector = si.RetrieveContent().propertyCollector.CreatePropertyCollector()
    collector.CreateFilter(spec, partialUpdates=False)
    try:
        with updates_followed(collector):
            yield
    finally:
        collector.DestroyPropertyCollector()


def labeller_floor(
    connect: Callable[[], Any], mover_si: Any, moves: Sequence[tuple[str, str]]
) -> list[float]:
    """`simulator_floor` of the node-labeller's VM feed (its default `match_fallback`), while
    its other feed (hosts, clusters, folders, datacenters, recent tasks) is followed beside on
    a session of its own, as the labeller's watch runs them (vcenter_watch.feed_properties):
    vcsim collects both filters again on every change."""
    vms, rest = feed_properties(watched_properties(guest_hostname=False))
    watcher, beside = connect(), connect()
    with following(beside, inventory_filter_spec(beside.RetrieveContent(), rest)[1]):
        spec = inventory_filter_spec(watcher.RetrieveContent(), vms)[1]
        return simulator_floor(watcher, mover_si, moves, spec)
