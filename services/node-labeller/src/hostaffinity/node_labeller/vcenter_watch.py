"""Follows a vCenter's inventory with PropertyCollector `WaitForUpdatesEx`: no polling loop.

One watcher per configured vCenter, each with its own session and property collector (as the
vSphere cloud provider keeps one connection per VirtualCenter section); its batches carry the
vCenter's name, and its failures and reconnects are its own.

One container view over the root folder covers VMs, hosts, clusters, folders and datacenters, and
the TaskManager's `recentTask` adds the tasks (so a host's EnterMaintenanceMode task is seen while
it runs, before the host is in maintenance mode); the filter asks only for the properties it is
given (`inventory.watched_properties`). The first answer after a (re)login, or after
`request_full_read`, is the complete inventory (a resync); later answers carry only changes.

The watcher owns its `VCenterSession` (runtime/vcenter/session.py): every long poll blocks that
session's one thread for at most `MAX_WAIT_SECONDS`, so the session's keep-alive waits at most
one poll and no other part of the service queues behind it; a stop cancels the poll in flight
(CancelWaitForUpdates) instead of waiting for it. A session vCenter ended is logged in again by
the session itself; the watcher then rebuilds its view and filter. Any other failure reconnects
the session, which logs the old vCenter session out first, so reconnects never pile sessions up.
"""

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyVmomi import VmomiSupport, vim, vmodl

from hostaffinity.node_labeller.inventory import TASK, ObjectUpdate, PropertyValue
from hostaffinity.node_labeller.metrics import WatchMetrics
from hostaffinity.runtime.vcenter.session import VCenterSession, VCenterSettings

log = logging.getLogger(__name__)

# How long one WaitForUpdatesEx call may wait on the server before returning empty; short enough
# that the session's keep-alive and a stop are served quickly, long enough to cost nothing idle.
MAX_WAIT_SECONDS = 2
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)

# pyVmomi builds its data types at run time; these names are the typed boundary to them.
_COLLECTOR: Any = vmodl.query.PropertyCollector
_MANAGED_OBJECT: Any = VmomiSupport.ManagedObject


@dataclass(frozen=True, slots=True)
class UpdateBatch:
    """Updates from one WaitForUpdatesEx answer of the vCenter named `vcenter`; `resync` marks
    a complete inventory."""

    vcenter: str
    updates: list[ObjectUpdate]
    resync: bool
    received_at: float


@dataclass(frozen=True, slots=True)
class _Answer:
    """One WaitForUpdatesEx answer, already turned into plain updates on the session's thread."""

    version: str
    truncated: bool
    updates: list[ObjectUpdate]


class InventoryWatcher:
    """Runs the WaitForUpdatesEx loop on its own vCenter session; batches arrive on `batches`."""

    def __init__(
        self, settings: VCenterSettings, properties: Mapping[str, tuple[str, ...]]
    ) -> None:
        self._settings = settings
        self._properties = properties
        self.vcenter = settings.known_as
        self.batches: asyncio.Queue[UpdateBatch] = asyncio.Queue()
        # Times the watch started over: after a failure, or after vCenter ended the session.
        self.reconnects = 0
        self._metrics = WatchMetrics()
        self._failures = 0
        self._full_read = False

    def request_full_read(self) -> None:
        """Make the next batch the complete inventory again (the periodic resync asks for it)."""
        self._full_read = True

    async def run(self) -> None:
        """Watch until cancelled; reconnects (and resyncs) after any session or network error."""
        session = VCenterSession(self._settings)
        login = session.start
        try:
            while True:
                try:
                    await login()
                    login = session.reconnect
                    await self._follow(session)
                except Exception as error:  # any failure: log in again and resync
                    delay = RETRY_DELAYS[min(self._failures, len(RETRY_DELAYS) - 1)]
                    self._failures += 1
                    # str, not repr: an untrusted certificate's line names the setting to fix.
                    why = str(error) or repr(error)
                    log.warning(
                        "vCenter %s watch failed (%s); reconnecting in %.1fs",
                        self.vcenter,
                        why,
                        delay,
                    )
                    await asyncio.sleep(delay)
                self._started_over()
        finally:
            await asyncio.to_thread(_cancel_wait, session)
            await session.close()

    def _started_over(self) -> None:
        self.reconnects += 1
        self._metrics.reconnected(self.vcenter)

    async def _follow(self, session: VCenterSession) -> None:
        """Build the view and filter, then poll; rebuild them when the session was renewed, or
        when a full read is asked for (a new filter reports every object as entering)."""
        collector = session.content.propertyCollector
        while True:
            relogins = session.relogins
            self._full_read = False
            view, property_filter = await session.call(
                _create_filter, session.content, self._properties
            )
            await self._poll(session, collector, relogins)
            if session.relogins != relogins:
                log.info(
                    "vCenter %s session renewed; rebuilding the inventory filter", self.vcenter
                )
                self._started_over()
            else:
                await session.call(_destroy, view, property_filter)

    async def _poll(self, session: VCenterSession, collector: Any, relogins: int) -> None:
        """Deliver batches until the session is renewed under us (its objects are gone then)
        or a full read is asked for."""
        version = ""
        resync = True
        pending: list[ObjectUpdate] = []
        options = _COLLECTOR.WaitOptions(maxWaitSeconds=MAX_WAIT_SECONDS)
        while session.relogins == relogins and not self._full_read:
            answer = await session.call(_wait_for_updates, collector, version, options)
            if answer is None or session.relogins != relogins:
                continue
            version = answer.version
            pending.extend(answer.updates)
            if answer.truncated:
                continue  # the rest of this answer comes with the next call
            self.batches.put_nowait(UpdateBatch(self.vcenter, pending, resync, time.monotonic()))
            pending, resync = [], False
            self._failures = 0


def _create_filter(content: Any, properties: Mapping[str, tuple[str, ...]]) -> tuple[Any, Any]:
    """A container view over everything and one filter on it and on the recent tasks.

    Both live in the session: a logout or an ended session removes them.
    """
    view, spec = inventory_filter_spec(content, properties)
    return view, content.propertyCollector.CreateFilter(spec, partialUpdates=False)


def inventory_filter_spec(
    content: Any, properties: Mapping[str, tuple[str, ...]]
) -> tuple[Any, Any]:
    """A new container view over every watched entity type, and the filter spec the watcher
    asks for on it (the benches time vCenter's answers to this very spec)."""
    types = [getattr(vim, name) for name in properties if name != TASK]  # tasks come another way
    view = content.viewManager.CreateContainerView(content.rootFolder, types, True)
    return view, _filter_spec(view, content.taskManager, properties)


def _destroy(view: Any, property_filter: Any) -> None:
    property_filter.Destroy()
    view.Destroy()


def _cancel_wait(session: VCenterSession) -> None:
    """End the long poll in flight (from a thread of its own, as the session's thread is busy
    with it), so that stopping waits for neither the poll nor the logout queued behind it."""
    try:
        session.content.propertyCollector.CancelWaitForUpdates()
    except Exception:  # not logged in, or the session is gone: no poll is waiting then
        log.debug("CancelWaitForUpdates failed", exc_info=True)


def _wait_for_updates(collector: Any, version: str, options: Any) -> _Answer | None:
    update_set = collector.WaitForUpdatesEx(version, options)
    if update_set is None:
        return None
    return _Answer(str(update_set.version), bool(update_set.truncated), _object_updates(update_set))


def _filter_spec(view: Any, task_manager: Any, properties: Mapping[str, tuple[str, ...]]) -> Any:
    """The view's objects, and each task in TaskManager.recentTask (queued, running and recently
    finished tasks; vSphere Web Services API, vim.TaskManager)."""
    traverse = _COLLECTOR.TraversalSpec(
        name="view", path="view", skip=False, type=vim.view.ContainerView
    )
    tasks = _COLLECTOR.TraversalSpec(
        name="recentTask", path="recentTask", skip=False, type=vim.TaskManager
    )
    return _COLLECTOR.FilterSpec(
        objectSet=[
            _COLLECTOR.ObjectSpec(obj=view, skip=True, selectSet=[traverse]),
            _COLLECTOR.ObjectSpec(obj=task_manager, skip=True, selectSet=[tasks]),
        ],
        propSet=[
            _COLLECTOR.PropertySpec(type=getattr(vim, name), pathSet=list(paths), all=False)
            for name, paths in properties.items()
        ],
    )


def _object_updates(update_set: Any) -> list[ObjectUpdate]:
    updates = []
    for filter_update in update_set.filterSet or []:
        for object_update in filter_update.objectSet or []:
            obj = object_update.obj
            props = {
                change.name: None
                if change.op in ("remove", "indirectRemove")
                else _plain(change.val)
                for change in object_update.changeSet or []
            }
            updates.append(
                ObjectUpdate(str(object_update.kind), obj._wsdlName, obj._moId, props)  # type: ignore[arg-type]
            )
    return updates


def _plain(value: Any) -> PropertyValue:
    """References become moids; enums and strings become str; booleans stay booleans."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, _MANAGED_OBJECT):
        return str(value._moId)
    return str(value)
