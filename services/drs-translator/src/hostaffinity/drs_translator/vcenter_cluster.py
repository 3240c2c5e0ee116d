"""vCenter's side of one vSphere cluster: its DRS rules and groups, read from and written to
vCenter (the translator's own settings are in config.py).

Reads `configurationEx` (its `rule` and `group` arrays) and writes with one
`ReconfigureComputeResource_Task` per batch (`modify=True`, so only the listed entries change).
A rule is edited and removed by its `key`, a group by its name: that is how vCenter addresses
them (and how govmomi's simulator does, simulator/cluster_compute_resource.go updateRules and
updateGroups at 0.24). Every call goes through the runtime's one `VCenterSession` and is counted.

After a network error (a reset, a refused or timed-out connection) the next use gives that
session up with `VCenterSession.reconnect`, which logs it out before logging in again, as the
node-labeller's watcher does: retries never pile sessions up in vCenter. A session vCenter ended
(`NotAuthenticated`) is logged in again by the session itself.
"""

import asyncio
import http.client
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final, ParamSpec, TypeVar

from pyVmomi import vim, vmodl

from hostaffinity.drs_translator.core.diff import Change
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.runtime.kube.leader import no_fence
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import DrsObjectKind

_RULE_KINDS: Final[tuple[tuple[type[Any], DrsObjectKind], ...]] = (
    (vim.cluster.AntiAffinityRuleSpec, "vm-anti-affinity"),
    (vim.cluster.AffinityRuleSpec, "vm-affinity"),
    (vim.cluster.VmHostRuleInfo, "vm-host"),
)
_TASK_POLL_SECONDS: Final = (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
# What pyVmomi raises when the connection, not vCenter, failed.
NETWORK_ERRORS: Final = (OSError, http.client.HTTPException)
_log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
# pyVmomi's stubs leave data object constructors untyped: build them through an Any.
_vim: Any = vim


class ReconfigureRefused(Exception):
    """vCenter rejected a reconfigure; the message is vCenter's fault."""


class ClusterRules:
    """DRS rules and groups of the clusters of one vCenter, through one session."""

    def __init__(
        self, session: VCenterSession, *, ensure_leading: Callable[[], None] = no_fence
    ) -> None:
        self._session = session
        # Checked in the session's thread just before each reconfigure leaves (runner.py).
        self._ensure_leading = ensure_leading
        # vCenter calls made, by kind: what the e2e tests and the benchmark report.
        self.calls: Counter[str] = Counter()
        self._connection_failed = False

    async def _cluster(self, cluster_moid: str) -> Any:
        """The cluster's managed object, on a session that is fit for use."""
        if self._connection_failed:
            _log.info("giving the vCenter session up after a network error; logging in again")
            self.calls["reconnect"] += 1
            await self._session.reconnect()
            self._connection_failed = False
        return _vim.ClusterComputeResource(cluster_moid, self._session.service_instance._stub)

    async def _call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await self._session.call(fn, *args, **kwargs)
        except NETWORK_ERRORS:
            self._connection_failed = True  # the next use reconnects
            raise

    async def read(self, cluster_moid: str) -> dict[str, DrsObject]:
        """Every rule and group of the cluster by name (kinds we do not write are skipped)."""
        cluster = await self._cluster(cluster_moid)
        self.calls["read-configurationEx"] += 1
        config: Any = await self._call(lambda: cluster.configurationEx)
        objects: dict[str, DrsObject] = {}
        for rule in config.rule or ():
            obj = _rule_object(cluster_moid, rule)
            if obj is not None:
                objects[obj.name] = obj
        for group in config.group or ():
            obj = _group_object(cluster_moid, group)
            if obj is not None:
                objects.setdefault(obj.name, obj)
        return objects

    def instance_uuid(self) -> str:
        """vCenter's instance UUID (`content.about.instanceUuid`, read at login): how installs
        that name this vCenter differently tell it is the same one (a fleet rule's lease is
        keyed by it)."""
        about: Any = self._session.content.about
        return str(about.instanceUuid or "")

    async def ha_config(self, cluster_moid: str) -> Any:
        """The cluster's vSphere HA settings (`configurationEx.dasConfig`) as vCenter has them."""
        cluster = await self._cluster(cluster_moid)
        self.calls["read-ha-config"] += 1
        config: Any = await self._call(lambda: cluster.configurationEx)
        return config.dasConfig

    async def reconfigure(self, cluster_moid: str, changes: Sequence[Change]) -> None:
        """Apply `changes` in one reconfigure; raises `ReconfigureRefused` if vCenter says no."""
        spec = _vim.cluster.ConfigSpecEx(
            rulesSpec=[_rule_spec(c) for c in changes if c.obj.is_rule],
            groupSpec=[_group_spec(c) for c in changes if not c.obj.is_rule],
        )
        cluster = await self._cluster(cluster_moid)

        def send() -> Any:
            self._ensure_leading()  # raises LeaseLapsed: nothing is sent
            self.calls["ReconfigureComputeResource_Task"] += 1
            return cluster.ReconfigureComputeResource_Task(spec=spec, modify=True)

        try:
            task = await self._call(send)
        except vmodl.MethodFault as fault:  # a SOAP fault: vCenter said no to this spec
            raise ReconfigureRefused(_fault_text(fault)) from fault
        await self._wait(task)

    async def _wait(self, task: Any) -> None:
        for attempt in range(10_000):
            self.calls["task-info"] += 1
            info = await self._call(lambda: task.info)
            if info.state == "success":
                return
            if info.state == "error":
                raise ReconfigureRefused(_fault_text(info.error))
            await asyncio.sleep(_TASK_POLL_SECONDS[min(attempt, len(_TASK_POLL_SECONDS) - 1)])


def _fault_text(fault: Any) -> str:
    if fault is None:
        return "vCenter gave no reason"
    message = getattr(fault, "localizedMessage", "") or getattr(fault, "msg", "")
    inner = getattr(fault, "fault", None)
    name = type(inner if inner is not None else fault).__name__
    return f"{name}: {message}" if message else name


def _moids(refs: Any) -> tuple[str, ...]:
    return tuple(sorted(ref._moId for ref in refs or ()))


def _rule_object(cluster_moid: str, rule: Any) -> DrsObject | None:
    for rule_type, kind in _RULE_KINDS:
        if isinstance(rule, rule_type):
            return DrsObject(
                name=rule.name,
                kind=kind,
                cluster_moid=cluster_moid,
                vms=_moids(getattr(rule, "vm", ())),
                vm_group=getattr(rule, "vmGroupName", "") or "",
                host_group=getattr(rule, "affineHostGroupName", "") or "",
                mandatory=bool(rule.mandatory),
                enabled=bool(rule.enabled),
                key=rule.key,
            )
    return None


def _group_object(cluster_moid: str, group: Any) -> DrsObject | None:
    if isinstance(group, vim.cluster.VmGroup):
        return DrsObject(group.name, "vm-group", cluster_moid, vms=_moids(group.vm))
    if isinstance(group, vim.cluster.HostGroup):
        return DrsObject(group.name, "host-group", cluster_moid, hosts=_moids(group.host))
    return None


def _rule_info(obj: DrsObject) -> Any:
    vms = [_vim.VirtualMachine(moid) for moid in obj.vms]
    common: dict[str, Any] = {"name": obj.name, "enabled": obj.enabled, "key": obj.key}
    if obj.kind == "vm-anti-affinity":
        return _vim.cluster.AntiAffinityRuleSpec(vm=vms, **common)
    if obj.kind == "vm-affinity":
        return _vim.cluster.AffinityRuleSpec(vm=vms, **common)
    return _vim.cluster.VmHostRuleInfo(
        vmGroupName=obj.vm_group,
        affineHostGroupName=obj.host_group,
        mandatory=obj.mandatory,
        **common,
    )


def _rule_spec(change: Change) -> Any:
    if change.op == "remove":
        return _vim.cluster.RuleSpec(operation="remove", removeKey=change.obj.key)
    return _vim.cluster.RuleSpec(operation=change.op, info=_rule_info(change.obj))


def _group_spec(change: Change) -> Any:
    obj = change.obj
    if change.op == "remove":
        return _vim.cluster.GroupSpec(operation="remove", removeKey=obj.name)
    info: Any
    if obj.kind == "vm-group":
        info = _vim.cluster.VmGroup(name=obj.name, vm=[_vim.VirtualMachine(m) for m in obj.vms])
    else:
        info = _vim.cluster.HostGroup(name=obj.name, host=[_vim.HostSystem(m) for m in obj.hosts])
    return _vim.cluster.GroupSpec(operation=change.op, info=info)
