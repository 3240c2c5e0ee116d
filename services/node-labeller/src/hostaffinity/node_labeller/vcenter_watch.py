"""Follows the vCenter inventory with PropertyCollector `WaitForUpdatesEx`: no polling loop.

One container view over the root folder covers VMs, hosts, clusters, folders and datacenters; the
filter asks only for the properties in `WATCHED_PROPERTIES`. The first answer after a (re)login is
the complete inventory (a resync); later answers carry only changes. The blocking pyVmomi calls
run on a dedicated thread and hand batches to the event loop.
"""

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics
from pyVmomi import VmomiSupport, vim, vmodl

from hostaffinity.node_labeller.inventory import WATCHED_PROPERTIES, ObjectUpdate, PropertyValue

log = logging.getLogger(__name__)
_reconnects = metrics.get_meter("hostaffinity.node_labeller").create_counter(
    "node_labeller_vcenter_reconnects",
    description="vCenter watch sessions lost and logged in again (each is followed by a resync)",
)

# How long one WaitForUpdatesEx call may wait on the server before returning empty; short enough
# that a stop request is noticed quickly, long enough to cost nothing when idle.
MAX_WAIT_SECONDS = 2
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)

# pyVmomi builds its data types at run time; these names are the typed boundary to them.
_COLLECTOR: Any = vmodl.query.PropertyCollector
_MANAGED_OBJECT: Any = VmomiSupport.ManagedObject


@dataclass(frozen=True, slots=True)
class UpdateBatch:
    """Updates from one WaitForUpdatesEx answer; `resync` marks a complete inventory."""

    updates: list[ObjectUpdate]
    resync: bool
    received_at: float


Connect = Callable[[], Any]  # returns a logged-in pyVmomi ServiceInstance


class InventoryWatcher:
    """Runs the WaitForUpdatesEx loop on a thread; batches arrive on `batches`."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._stop = threading.Event()
        self.batches: asyncio.Queue[UpdateBatch] = asyncio.Queue()
        self.reconnects = 0

    async def run(self) -> None:
        """Watch until `stop()`; reconnects (and resyncs) after any session or network error."""
        loop = asyncio.get_running_loop()

        def deliver(batch: UpdateBatch) -> None:
            loop.call_soon_threadsafe(self.batches.put_nowait, batch)

        await asyncio.to_thread(self._watch_forever, deliver)

    def stop(self) -> None:
        self._stop.set()

    def _watch_forever(self, deliver: Callable[[UpdateBatch], None]) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._watch_one_session(deliver)
                failures = 0
            except Exception as error:  # any failure: log in again and resync
                delay = RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)]
                failures += 1
                self.reconnects += 1
                _reconnects.add(1)
                log.warning("vCenter watch failed (%s); reconnecting in %.1fs", error, delay)
                self._stop.wait(delay)

    def _watch_one_session(self, deliver: Callable[[UpdateBatch], None]) -> None:
        service_instance = self._connect()
        content = service_instance.RetrieveContent()
        view = content.viewManager.CreateContainerView(
            content.rootFolder, list(_managed_types()), True
        )
        collector = content.propertyCollector.CreateFilter  # bound for readability below
        property_filter = collector(_filter_spec(view), partialUpdates=False)
        try:
            self._wait_loop(content.propertyCollector, deliver)
        finally:
            _quietly(property_filter.Destroy)
            _quietly(view.Destroy)

    def _wait_loop(self, collector: Any, deliver: Callable[[UpdateBatch], None]) -> None:
        version = ""
        resync = True
        pending: list[ObjectUpdate] = []
        options = _COLLECTOR.WaitOptions(maxWaitSeconds=MAX_WAIT_SECONDS)
        while not self._stop.is_set():
            update_set = collector.WaitForUpdatesEx(version, options)
            if update_set is None:
                continue
            version = update_set.version
            pending.extend(_object_updates(update_set))
            if update_set.truncated:
                continue  # the rest of this answer comes with the next call
            deliver(UpdateBatch(pending, resync, time.monotonic()))
            pending, resync = [], False


def _managed_types() -> list[Any]:
    return [getattr(vim, name) for name in WATCHED_PROPERTIES]


def _filter_spec(view: Any) -> Any:
    traverse = _COLLECTOR.TraversalSpec(
        name="view", path="view", skip=False, type=vim.view.ContainerView
    )
    return _COLLECTOR.FilterSpec(
        objectSet=[_COLLECTOR.ObjectSpec(obj=view, skip=True, selectSet=[traverse])],
        propSet=[
            _COLLECTOR.PropertySpec(type=getattr(vim, name), pathSet=list(paths), all=False)
            for name, paths in WATCHED_PROPERTIES.items()
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


def _quietly(call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception:  # cleanup on a dead session fails; the server drops it anyway
        log.debug("cleanup call failed", exc_info=True)
