"""The node-labeller's copy of the vCenter inventory, fed by PropertyCollector updates.

It holds only the properties placement needs, keeps indexes for matching nodes to VMs, and says
which VMs an update affects so that only their nodes are re-examined.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

VM = "VirtualMachine"
HOST = "HostSystem"
DATACENTER = "Datacenter"
TASK = "Task"
# A host's EnterMaintenanceMode task, as vCenter describes it (TaskInfo.descriptionId), and the
# task states in which the host is still on its way in (vim.TaskInfo.State).
ENTER_MAINTENANCE = "HostSystem.enterMaintenanceMode"
UNFINISHED_TASK_STATES = frozenset({"queued", "running"})
COMPUTE_TYPES = ("ClusterComputeResource", "ComputeResource")

# The properties the vCenter watcher asks for, per managed object type.
WATCHED_PROPERTIES: dict[str, tuple[str, ...]] = {
    VM: ("name", "config.uuid", "config.instanceUuid", "runtime.host", "guest.hostName"),
    HOST: ("name", "parent", "runtime.connectionState", "runtime.inMaintenanceMode"),
    "ClusterComputeResource": ("name", "parent"),
    "ComputeResource": ("name", "parent"),
    "Folder": ("name", "parent"),
    DATACENTER: ("name", "parent"),
    # Reached through TaskManager.recentTask, not the container view (a task is no entity).
    TASK: ("info.descriptionId", "info.entity", "info.state"),
}
GUEST_HOSTNAME = "guest.hostName"


def watched_properties(*, guest_hostname: bool) -> dict[str, tuple[str, ...]]:
    """What the watcher asks vCenter for: the guest's hostname only where nodes are matched by it
    (`match_fallback: guest-hostname`). VMware Tools reports it again and again, and every
    watched property is work for vCenter on each change of every VM."""
    if guest_hostname:
        return WATCHED_PROPERTIES
    return {
        name: tuple(path for path in paths if path != GUEST_HOSTNAME)
        for name, paths in WATCHED_PROPERTIES.items()
    }


PropertyValue = str | bool | None


@dataclass(frozen=True, slots=True)
class ObjectUpdate:
    """One object's change as PropertyCollector reports it, with references as moid strings."""

    kind: Literal["enter", "modify", "leave"]
    obj_type: str
    moid: str
    props: dict[str, PropertyValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VmFacts:
    moid: str
    name: str
    bios_uuid: str
    instance_uuid: str
    host_moid: str | None
    guest_hostname: str | None


@dataclass(frozen=True, slots=True)
class HostFacts:
    """An ESXi host with the cluster and datacenter it belongs to, resolved through parents."""

    moid: str
    name: str
    cluster_moid: str
    cluster_name: str
    datacenter: str
    connection_state: str
    in_maintenance_mode: bool
    entering_maintenance: bool
    vcenter_uuid: str = ""


@dataclass(slots=True)
class _Object:
    obj_type: str
    props: dict[str, PropertyValue]


class Inventory:
    """Objects by moid plus the indexes node matching needs (BIOS UUID, VM name, guest name)."""

    def __init__(self, vcenter_uuid: str = "") -> None:
        # The vCenter's instance UUID, given with each complete read (UpdateBatch).
        self.vcenter_uuid = vcenter_uuid
        self._objects: dict[str, _Object] = {}
        self._vms_by_uuid: dict[str, set[str]] = defaultdict(set)
        self._vms_by_name: dict[str, set[str]] = defaultdict(set)
        self._vms_by_guest_hostname: dict[str, set[str]] = defaultdict(set)
        self._vms_by_host: dict[str, set[str]] = defaultdict(set)
        # Per host, its EnterMaintenanceMode tasks still queued or running: a resync reads every
        # host once per node, and a scan of a few hundred recent tasks each time cost seconds.
        self._entering_tasks: dict[str, set[str]] = defaultdict(set)

    def apply(self, update: ObjectUpdate) -> set[str] | None:
        """Apply one update; return the VM moids whose placement may have changed (None: all)."""
        if update.obj_type == VM:
            self._unindex_vm(update.moid)
        if update.obj_type == TASK:
            self._unindex_task(update.moid)
        if update.kind == "leave":
            self._objects.pop(update.moid, None)
        else:
            current = self._objects.setdefault(update.moid, _Object(update.obj_type, {}))
            current.props.update(update.props)
        if update.obj_type == VM:
            if update.kind != "leave":
                self._index_vm(update.moid)
            return {update.moid}
        if update.obj_type == HOST:
            return set(self._vms_by_host.get(update.moid, ()))
        if update.obj_type == TASK:
            if update.kind != "leave":
                self._index_task(update.moid)
            return set()  # a task moves no VM; its host is re-examined (`host_of_task`)
        return None

    def vm_moids(self) -> list[str]:
        return [moid for moid, obj in self._objects.items() if obj.obj_type == VM]

    def vm(self, moid: str) -> VmFacts | None:
        obj = self._objects.get(moid)
        if obj is None or obj.obj_type != VM:
            return None
        props = obj.props
        return VmFacts(
            moid=moid,
            name=_text(props.get("name")),
            bios_uuid=_text(props.get("config.uuid")).lower(),
            instance_uuid=_text(props.get("config.instanceUuid")).lower(),
            host_moid=_optional_text(props.get("runtime.host")),
            guest_hostname=_optional_text(props.get(GUEST_HOSTNAME)),
        )

    def host(self, moid: str) -> HostFacts | None:
        obj = self._objects.get(moid)
        if obj is None or obj.obj_type != HOST:
            return None
        cluster_moid = _text(obj.props.get("parent"))
        cluster = self._objects.get(cluster_moid)
        return HostFacts(
            moid=moid,
            name=_text(obj.props.get("name")),
            cluster_moid=cluster_moid,
            cluster_name=_text(cluster.props.get("name")) if cluster else "",
            datacenter=self._datacenter_name(cluster_moid),
            connection_state=_text(obj.props.get("runtime.connectionState")),
            in_maintenance_mode=obj.props.get("runtime.inMaintenanceMode") is True,
            entering_maintenance=self._entering_maintenance(moid),
            vcenter_uuid=self.vcenter_uuid,
        )

    def host_of_task(self, moid: str) -> str | None:
        """The host an EnterMaintenanceMode task concerns, if `moid` is one."""
        obj = self._objects.get(moid)
        if obj is None or obj.obj_type != TASK:
            return None
        if obj.props.get("info.descriptionId") != ENTER_MAINTENANCE:
            return None
        return _optional_text(obj.props.get("info.entity"))

    def _entering_maintenance(self, host_moid: str) -> bool:
        """Whether an EnterMaintenanceMode task on the host is queued or running."""
        return bool(self._entering_tasks.get(host_moid))

    def _index_task(self, moid: str) -> None:
        host = self.host_of_task(moid)
        if host and self._objects[moid].props.get("info.state") in UNFINISHED_TASK_STATES:
            self._entering_tasks[host].add(moid)

    def _unindex_task(self, moid: str) -> None:
        host = self.host_of_task(moid)
        if host and (tasks := self._entering_tasks.get(host)) is not None:
            tasks.discard(moid)
            if not tasks:
                del self._entering_tasks[host]

    def host_moids(self) -> list[str]:
        return [moid for moid, obj in self._objects.items() if obj.obj_type == HOST]

    def vms_with_uuid(self, uuid: str) -> set[str]:
        return set(self._vms_by_uuid.get(uuid.lower(), ()))

    def vms_named(self, name: str) -> set[str]:
        return set(self._vms_by_name.get(name, ()))

    def vms_with_guest_hostname(self, hostname: str) -> set[str]:
        return set(self._vms_by_guest_hostname.get(hostname, ()))

    def ancestry(self, moid: str) -> list[str]:
        """`moid` and its parents, nearest first: host, cluster, folders, datacenter, and the
        root folder (named by the datacenter's parent, though the view does not hold it)."""
        chain: list[str] = []
        while moid and moid not in chain:
            chain.append(moid)
            obj = self._objects.get(moid)
            moid = _text(obj.props.get("parent")) if obj is not None else ""
        return chain

    def _datacenter_name(self, moid: str) -> str:
        """Walk parents (clusters sit in host folders, possibly nested) up to the datacenter."""
        seen: set[str] = set()
        while moid and moid not in seen:
            seen.add(moid)
            obj = self._objects.get(moid)
            if obj is None:
                return ""
            if obj.obj_type == DATACENTER:
                return _text(obj.props.get("name"))
            moid = _text(obj.props.get("parent"))
        return ""

    def _index_vm(self, moid: str) -> None:
        facts = self.vm(moid)
        if facts is None:
            return
        if facts.bios_uuid:
            self._vms_by_uuid[facts.bios_uuid].add(moid)
        if facts.name:
            self._vms_by_name[facts.name].add(moid)
        if facts.guest_hostname:
            self._vms_by_guest_hostname[facts.guest_hostname].add(moid)
        if facts.host_moid:
            self._vms_by_host[facts.host_moid].add(moid)

    def _unindex_vm(self, moid: str) -> None:
        facts = self.vm(moid)
        if facts is None:
            return
        for index, key in (
            (self._vms_by_uuid, facts.bios_uuid),
            (self._vms_by_name, facts.name),
            (self._vms_by_guest_hostname, facts.guest_hostname),
            (self._vms_by_host, facts.host_moid),
        ):
            if key and key in index:
                index[key].discard(moid)
                if not index[key]:
                    del index[key]


def _text(value: PropertyValue) -> str:
    return value if isinstance(value, str) else ""


def _optional_text(value: PropertyValue) -> str | None:
    return value if isinstance(value, str) and value else None
