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

The first batch after a (re)login is the complete inventory (a resync), both feeds' first answers
together; later batches carry only changes, each feed's as they come. A failure in either feed
starts both over.

`request_full_read` (the periodic resync) reads the whole inventory again on a third session, the
reader's, while both feeds go on: a vMotion during the read (seconds, at thousands of VMs) is
still labelled within its usual fraction of a second. The read is a snapshot of some moment
during it, so every change the feeds delivered since it began is applied again after it, in the
same resync batch: an older snapshot never undoes a move already labelled.

Each feed, and the reader, owns its `VCenterSession` (runtime/vcenter/session.py): every long
poll blocks that session's one thread for at most `MAX_WAIT_SECONDS`, so the session's keep-alive
waits at most one poll and no other part of the service queues behind it; a stop cancels the
polls in flight (CancelWaitForUpdates) instead of waiting for them. A session vCenter ended is
logged in again by the session itself; the watcher then rebuilds the collectors, views and
filters made on it. Any other failure reconnects the sessions, which log the old vCenter
sessions out first, so reconnects never pile sessions up.

`following` says whether the watch is up now: from the first complete read on fresh sessions
until a failure (`away` then says since when and why), a readiness part of its vCenter's own.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyVmomi import VmomiSupport, vim, vmodl

from hostaffinity.node_labeller.core.inventory import TASK, VM, ObjectUpdate, PropertyValue
from hostaffinity.node_labeller.metrics import WatchMetrics
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.schema import utc_timestamp

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
    # vCenter's instance UUID (content.about.instanceUuid), read with the filters: with a host's
    # moid, the host's identity across installs (the fleet view).
    vcenter_uuid: str = ""


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


def vcenter_sessions(properties: Properties) -> int:
    """The vCenter sessions one watcher holds: one per feed, and the full reads' own."""
    return len(feed_properties(properties)) + 1


class _Feed:
    """A feed's part of the inventory, or all of it for the reader's full reads, on a session of
    its own: the collector, view and filter made on it (session objects: a logout or an ended
    session removes them)."""

    def __init__(self, settings: VCenterSettings, properties: Properties) -> None:
        self.properties = properties
        self.session = VCenterSession(settings)
        self._collector: Any = None
        self._view: Any = None
        self._built_in = 0  # the session's relogins when the objects were made
        self.vcenter_uuid = ""

    def build(self) -> None:
        """On the session's thread: a collector of its own with one filter on a new view."""
        content = self.session.content
        self.vcenter_uuid = str(getattr(content.about, "instanceUuid", "") or "").lower()
        self._built_in = self.session.relogins
        self._collector = content.propertyCollector.CreatePropertyCollector()
        self._view, spec = inventory_filter_spec(content, self.properties)
        self._collector.CreateFilter(spec, partialUpdates=False)

    def built_on_this_session(self) -> bool:
        """False once vCenter ended the session the objects were made on (they went with it)."""
        return self.session.relogins == self._built_in

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
            if self.built_on_this_session():
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
        self._following = False
        self._away_since = ""  # when the watch last went down; "" while it never was up
        self._why = "not read yet"
        self._full_read = asyncio.Event()
        # The changes delivered since the full read in progress began; None between reads.
        self._delivered_during_read: list[ObjectUpdate] | None = None

    def following(self) -> bool:
        """The watch is up: read whole on its current sessions, and no failure since."""
        return self._following

    def away(self) -> str:
        """Why the watch is not up (since when, and the last error)."""
        if self._following:
            return ""
        return f"away since {self._away_since}: {self._why}" if self._away_since else self._why

    def request_full_read(self) -> None:
        """Have the complete inventory read again, beside the feeds, and delivered as a resync
        batch (the periodic resync asks for it)."""
        self._full_read.set()

    async def run(self) -> None:
        """Watch until cancelled; reconnects (and resyncs) after any session or network error."""
        feeds = [_Feed(self._settings, part) for part in feed_properties(self._properties)]
        reader = _Feed(self._settings, self._properties)
        sessions = [*feeds, reader]
        logged_in = False
        try:
            while True:
                try:
                    for feed in sessions:
                        await (feed.session.reconnect() if logged_in else feed.session.start())
                    logged_in = True
                    await self._follow(feeds, reader)
                except Exception as error:  # any failure: log in again and resync
                    delay = RETRY_DELAYS[min(self._failures, len(RETRY_DELAYS) - 1)]
                    self._failures += 1
                    # str, not repr: an untrusted certificate's line names the setting to fix.
                    why = str(error) or repr(error)
                    self._went_away(why)
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
            await asyncio.gather(*(asyncio.to_thread(feed.cancel_wait) for feed in sessions))
            for feed in sessions:
                await feed.session.close()

    def _went_away(self, why: str) -> None:
        if self._following:
            self._away_since = utc_timestamp()
        self._following = False
        self._why = why

    def _started_over(self) -> None:
        self.reconnects += 1
        self._metrics.reconnected(self.vcenter)

    async def _follow(self, feeds: list[_Feed], reader: _Feed) -> None:
        """Build the feeds' filters, then poll; rebuild them when a feed's session was renewed
        (its objects went with the old one, and a new filter reports every object as entering)."""
        while True:
            self._full_read.clear()  # the feeds' first answers are a full read
            for feed in feeds:
                await feed.session.call(feed.build)
            await self._poll(feeds, reader)
            log.info("vCenter %s session renewed; rebuilding the inventory filters", self.vcenter)
            self._started_over()

    async def _poll(self, feeds: list[_Feed], reader: _Feed) -> None:
        """The feeds' complete answers as one resync batch, then each feed's changes as they
        come and the full reads asked for, until a feed's session is renewed under us."""

        def unchanged() -> bool:
            return all(feed.built_on_this_session() for feed in feeds)

        wholes = await _side_by_side([_read_whole(feed, unchanged) for feed in feeds])
        if not unchanged():
            return
        updates = [update for _, part in wholes for update in part]
        batch = UpdateBatch(self.vcenter, updates, True, time.monotonic(), reader.vcenter_uuid)
        self.batches.put_nowait(batch)
        self._failures = 0
        self._following = True
        await _until_one_ends(
            [
                *(
                    self._follow_changes(feed, version, unchanged)
                    for feed, (version, _) in zip(feeds, wholes, strict=True)
                ),
                self._full_reads(reader),
            ]
        )

    async def _follow_changes(
        self, feed: _Feed, version: str, unchanged: Callable[[], bool]
    ) -> None:
        pending: list[ObjectUpdate] = []
        while unchanged():
            answer = await feed.session.call(feed.wait_for_updates, version, _WAIT)
            if answer is None or not unchanged():
                continue
            version = answer.version
            pending.extend(answer.updates)
            if answer.truncated:
                continue  # the rest of this answer comes with the next call
            self._deliver(pending)
            pending = []

    def _deliver(self, changes: list[ObjectUpdate]) -> None:
        self.batches.put_nowait(UpdateBatch(self.vcenter, changes, False, time.monotonic()))
        if self._delivered_during_read is not None:
            self._delivered_during_read.extend(changes)

    async def _full_reads(self, reader: _Feed) -> None:
        """Each full read asked for, on the reader's session: a snapshot, then again every change
        the feeds delivered since the read began. Each was delivered after the moment it
        describes, so in order they bring any object the snapshot read earlier up to date."""
        while True:
            await self._full_read.wait()
            self._full_read.clear()
            self._delivered_during_read = []
            try:
                snapshot = await _snapshot(reader)
                if snapshot is None:  # vCenter ended the reader's session: read again
                    self._full_read.set()
                    continue
                self.batches.put_nowait(
                    UpdateBatch(
                        self.vcenter,
                        snapshot + self._delivered_during_read,
                        True,
                        time.monotonic(),
                        reader.vcenter_uuid,
                    )
                )
            finally:
                self._delivered_during_read = None


async def _snapshot(reader: _Feed) -> list[ObjectUpdate] | None:
    """The whole inventory, read on a filter of its own made for this read; None when vCenter
    ended the session during the read."""
    await reader.session.call(reader.build)
    try:
        _, updates = await _read_whole(reader, reader.built_on_this_session)
    finally:
        if reader.built_on_this_session():
            await reader.session.call(reader.destroy)
    return updates if reader.built_on_this_session() else None


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


async def _side_by_side(work: list[Awaitable[T]]) -> list[T]:
    """Run side by side; the first failure cancels the rest and is raised as itself (its
    message names what to fix, which an exception group would hide)."""
    tasks = [asyncio.ensure_future(item) for item in work]
    try:
        return await asyncio.gather(*tasks)
    finally:
        await _cancelled(tasks)


async def _until_one_ends(work: list[Awaitable[None]]) -> None:
    """Run side by side until the first ends, and cancel the rest; a failure is raised as
    itself."""
    tasks = [asyncio.ensure_future(item) for item in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        await _cancelled(tasks)


async def _cancelled(tasks: Sequence[asyncio.Future[Any]]) -> None:
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
