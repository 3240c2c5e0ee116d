"""Follows a vCenter's inventory with PropertyCollector `WaitForUpdatesEx`: no polling loop.

One watcher per configured vCenter (as the vSphere cloud provider keeps one connection per
VirtualCenter section); its batches carry the vCenter's name, and its failures and reconnects are
its own.

The watch is split in two feeds, each with its own session and its own property collector
(`CreatePropertyCollector`, as govmomi's `property.Wait` makes one per wait): the VMs, whose
`runtime.host` a vMotion changes, and the rest (hosts, clusters, folders, datacenters, and the
tasks of TaskManager's `recentTask`, so a host's EnterMaintenanceMode task is seen while it runs).
A collector answers for all its filter covers at once, so a burst of task or host changes never
holds a VM's move back; vcsim (govmomi 0.24) even collects a filter's whole object set again for
every change anywhere in its inventory, which made one filter over everything twice as slow to
report a vMotion (bench/README.md). A collector of our own also never shares the session's default
one with another watch. Each filter asks only for the properties it is given
(`inventory.watched_properties`).

The first batch after a (re)login, or after `request_full_read`, is the complete inventory (a
resync), both feeds' first answers together; later batches carry only changes, each feed's as they
come. A failure in either feed starts both over.

Each feed owns its `VCenterSession` (runtime/vcenter/session.py): every long poll blocks that
session's one thread for at most `MAX_WAIT_SECONDS`, so the session's keep-alive waits at most
one poll and no other part of the service queues behind it; a stop cancels the polls in flight
(CancelWaitForUpdates) instead of waiting for them. A session vCenter ended is logged in again by
the session itself; the watcher then rebuilds its collectors, views and filters. Any other failure
reconnects the sessions, which log the old vCenter sessions out first, so reconnects never pile
sessions up.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pyVmomi import VmomiSupport, vim, vmodl

from hostaffinity.node_labeller.inventory import TASK, VM, ObjectUpdate, PropertyValue
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
_WAIT: Any = _COLLECTOR.WaitOptions(maxWaitSeconds=MAX_WAIT_SECONDS)

T = TypeVar("T")
Properties = Mapping[str, tuple[str, ...]]


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


def feed_properties(properties: Properties) -> list[dict[str, tuple[str, ...]]]:
    """The watched properties split into the feeds: the VMs', and every other type's."""
    vms = {name: paths for name, paths in properties.items() if name == VM}
    rest = {name: paths for name, paths in properties.items() if name != VM}
    return [part for part in (vms, rest) if part]


class _Feed:
    """One part of the inventory on a session of its own: the collector, view and filter made on
    it (session objects: a logout or an ended session removes them)."""

    def __init__(self, settings: VCenterSettings, properties: Properties) -> None:
        self.properties = properties
        self.session = VCenterSession(settings)
        self._collector: Any = None
        self._view: Any = None
        self._built_in = 0  # the session's relogins when the objects were made

    def build(self) -> None:
        """On the session's thread: a collector of its own with one filter on a new view."""
        content = self.session.content
        self._built_in = self.session.relogins
        self._collector = content.propertyCollector.CreatePropertyCollector()
        self._view, spec = inventory_filter_spec(content, self.properties)
        self._collector.CreateFilter(spec, partialUpdates=False)

    def destroy(self) -> None:
        """On the session's thread: the collector (with its filter) and the view."""
        self._collector.DestroyPropertyCollector()
        self._view.Destroy()

    def wait_for_updates(self, version: str, options: Any) -> _Answer | None:
        """One long poll; None when it timed out, was cancelled, or when vCenter ended the
        session meanwhile (the session logged in again and retried, but the collector died with
        the old one)."""
        try:
            update_set = self._collector.WaitForUpdatesEx(version, options)
        except vmodl.fault.ManagedObjectNotFound:
            if self.session.relogins == self._built_in:
                raise
            return None
        except vmodl.fault.RequestCanceled:  # `cancel_wait`: a full read or a stop is due
            return None
        if update_set is None:
            return None
        return _Answer(
            str(update_set.version), bool(update_set.truncated), _object_updates(update_set)
        )

    def cancel_wait(self) -> None:
        """End the long poll in flight (from a thread of its own, as the session's thread is
        busy with it), so that a stop or a full read waits for neither the poll nor what queues
        behind it."""
        try:
            if self._collector is not None:
                self._collector.CancelWaitForUpdates()
        except Exception:  # not logged in, or the session is gone: no poll is waiting then
            log.debug("CancelWaitForUpdates failed", exc_info=True)


class InventoryWatcher:
    """Runs the WaitForUpdatesEx loops of its feeds; batches arrive on `batches`."""

    def __init__(self, settings: VCenterSettings, properties: Properties) -> None:
        self._settings = settings
        self._properties = properties
        self.vcenter = settings.known_as
        self.batches: asyncio.Queue[UpdateBatch] = asyncio.Queue()
        # Times the watch started over: after a failure, or after vCenter ended a session.
        self.reconnects = 0
        self._metrics = WatchMetrics()
        self._failures = 0
        self._full_read = False
        self._feeds: list[_Feed] = []

    def request_full_read(self) -> None:
        """Make the next batch the complete inventory again (the periodic resync asks for it).
        The polls in flight are cancelled, so the read starts at once: a feed whose poll ended
        would otherwise stop following changes until the other's poll timed out (up to 2 s), a
        vMotion meanwhile waiting for it."""
        self._full_read = True
        loop = asyncio.get_running_loop()
        for feed in self._feeds:
            loop.run_in_executor(None, feed.cancel_wait)

    async def run(self) -> None:
        """Watch until cancelled; reconnects (and resyncs) after any session or network error."""
        feeds = self._feeds = [
            _Feed(self._settings, part) for part in feed_properties(self._properties)
        ]
        logged_in = False
        try:
            while True:
                try:
                    for feed in feeds:
                        await (feed.session.reconnect() if logged_in else feed.session.start())
                    logged_in = True
                    await self._follow(feeds)
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
                    logged_in = True  # a failed start is retried by `reconnect`
                self._started_over()
        finally:
            await asyncio.gather(*(asyncio.to_thread(feed.cancel_wait) for feed in feeds))
            for feed in feeds:
                await feed.session.close()

    def _started_over(self) -> None:
        self.reconnects += 1
        self._metrics.reconnected(self.vcenter)

    async def _follow(self, feeds: list[_Feed]) -> None:
        """Build the feeds' filters, then poll; rebuild them when a session was renewed, or when
        a full read is asked for (a new filter reports every object as entering)."""
        while True:
            relogins = _relogins(feeds)
            self._full_read = False
            for feed in feeds:
                await feed.session.call(feed.build)
            await self._poll(feeds, relogins)
            if _relogins(feeds) != relogins:
                log.info(
                    "vCenter %s session renewed; rebuilding the inventory filters", self.vcenter
                )
                self._started_over()
            else:
                for feed in feeds:
                    await feed.session.call(feed.destroy)

    async def _poll(self, feeds: list[_Feed], relogins: list[int]) -> None:
        """The feeds' complete answers as one resync batch, then each feed's changes as they
        come, until a session is renewed under us (its objects are gone then) or a full read is
        asked for."""

        def unchanged() -> bool:
            return _relogins(feeds) == relogins

        wholes = await _side_by_side([_read_whole(feed, unchanged) for feed in feeds])
        if not unchanged():
            return
        updates = [update for _, part in wholes for update in part]
        self.batches.put_nowait(UpdateBatch(self.vcenter, updates, True, time.monotonic()))
        self._failures = 0
        await _side_by_side(
            [
                self._follow_changes(feed, version, unchanged)
                for feed, (version, _) in zip(feeds, wholes, strict=True)
            ]
        )

    async def _follow_changes(
        self, feed: _Feed, version: str, unchanged: Callable[[], bool]
    ) -> None:
        pending: list[ObjectUpdate] = []
        while unchanged() and not self._full_read:
            answer = await feed.session.call(feed.wait_for_updates, version, _WAIT)
            if answer is None or not unchanged():
                continue
            version = answer.version
            pending.extend(answer.updates)
            if answer.truncated:
                continue  # the rest of this answer comes with the next call
            self.batches.put_nowait(UpdateBatch(self.vcenter, pending, False, time.monotonic()))
            pending = []


async def _read_whole(feed: _Feed, unchanged: Callable[[], bool]) -> tuple[str, list[ObjectUpdate]]:
    """A feed's first answer, every part of it (a big one comes truncated, in parts)."""
    version, updates = "", []
    while unchanged():
        answer = await feed.session.call(feed.wait_for_updates, version, _WAIT)
        if answer is None:
            continue
        version = answer.version
        updates.extend(answer.updates)
        if not answer.truncated:
            break
    return version, updates


def _relogins(feeds: list[_Feed]) -> list[int]:
    return [feed.session.relogins for feed in feeds]


async def _side_by_side(work: list[Awaitable[T]]) -> list[T]:
    """Run side by side; the first failure cancels the rest and is raised as itself (its
    message names what to fix, which an exception group would hide)."""
    tasks = [asyncio.ensure_future(item) for item in work]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def inventory_filter_spec(content: Any, properties: Properties) -> tuple[Any, Any]:
    """A new container view over every watched entity type, and the filter spec a feed asks for
    on it (the benches time vCenter's answers to this very spec)."""
    types = [getattr(vim, name) for name in properties if name != TASK]  # tasks come another way
    view = content.viewManager.CreateContainerView(content.rootFolder, types, True)
    return view, _filter_spec(view, content.taskManager, properties)


def _filter_spec(view: Any, task_manager: Any, properties: Properties) -> Any:
    """The view's objects, and where tasks are watched each task in TaskManager.recentTask
    (queued, running and recently finished tasks; vSphere Web Services API, vim.TaskManager)."""
    traverse = _COLLECTOR.TraversalSpec(
        name="view", path="view", skip=False, type=vim.view.ContainerView
    )
    objects = [_COLLECTOR.ObjectSpec(obj=view, skip=True, selectSet=[traverse])]
    if TASK in properties:
        tasks = _COLLECTOR.TraversalSpec(
            name="recentTask", path="recentTask", skip=False, type=vim.TaskManager
        )
        objects.append(_COLLECTOR.ObjectSpec(obj=task_manager, skip=True, selectSet=[tasks]))
    return _COLLECTOR.FilterSpec(
        objectSet=objects,
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
