"""This install's exposure across the fleet, as gauges for its own Prometheus (docs/fleet.md):

- `hostaffinity_fleet_exposed_replicas{kind}`: this cluster's replicas that share an ESXi host
  with another replica of the same workload (`kind="workload"`) or of the same fleet group, in
  any cluster (`kind="fleet-group"`): one host failure takes both;
- `hostaffinity_fleet_view_since_contact_seconds`: how long ago the install's mirror of the
  fleet view last heard from the hub (the view is that stale; JetStream's mirror `active`).

Read from the install's own mirror (`hostaffinity-fleet`), kept current by one watch; the
exposure is worked out again at most every `refresh_seconds` after a change. Only on an install
that joined a fleet (`nats.fleet_install`); the hub being away only ages the view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Final

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue
from opentelemetry.metrics import Observation

from hostaffinity.affinity.fleet import exposed_replicas, exposure, read_view
from hostaffinity.descheduler.metrics import METER
from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM
from hostaffinity.runtime.process.observed import observe_latest
from hostaffinity.schema import FLEET_BUCKET

_log = logging.getLogger(__name__)
KINDS: Final = ("workload", "fleet-group")
DEFAULT_REFRESH_SECONDS: Final = 30.0
_RETRY_SECONDS: Final = 30.0
_NANOSECONDS: Final = 1e9


class FleetExposure:
    """The gauges' values, from the mirror; the instance built last is the one reported."""

    def __init__(self, install: str, refresh_seconds: float = DEFAULT_REFRESH_SECONDS) -> None:
        self.install = install
        self.refresh_seconds = refresh_seconds
        self.entries: dict[str, bytes] = {}
        self.exposed: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.since_contact: float | None = None
        self._changed = asyncio.Event()
        observe_latest(
            METER,
            "hostaffinity_fleet_exposed_replicas",
            self._observe_exposed,
            description="This cluster's replicas sharing an ESXi host with another replica of "
            "their workload or fleet group, in any cluster of the fleet",
        )
        observe_latest(
            METER,
            "hostaffinity_fleet_view_since_contact",  # served with its unit: _seconds
            self._observe_contact,
            unit="s",
            description="Seconds since this install's mirror of the fleet view last heard from "
            "the hub",
        )

    def _observe_exposed(self) -> Iterable[Observation]:
        return [Observation(count, {"kind": kind}) for kind, count in self.exposed.items()]

    def _observe_contact(self) -> Iterable[Observation]:
        return [] if self.since_contact is None else [Observation(self.since_contact)]

    def recompute(self) -> None:
        counts = exposed_replicas(exposure(read_view(self.entries)))
        self.exposed = {kind: counts.get((self.install, kind), 0) for kind in KINDS}

    async def run(self, js: JetStreamContext) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watch(js))
            group.create_task(self._contact(js))
            group.create_task(self._recompute_loop())

    async def _watch(self, js: JetStreamContext) -> None:
        while True:
            try:
                kv = await js.key_value(FLEET_BUCKET)
                watcher = await kv.watchall()
                try:
                    await self._follow(watcher)
                finally:
                    # Its consumer's activity check is a task of its own: gone with the watch.
                    with contextlib.suppress(NatsError, TimeoutError):
                        await watcher.stop()  # type: ignore[no-untyped-call]
            except BucketNotFoundError:
                _log.warning("no fleet view on this bus (run `hostaffinity bus provision`)")
            except (NatsError, TimeoutError) as error:
                _log.warning("fleet view watch ended (%r); starting again", error)
            await asyncio.sleep(_RETRY_SECONDS)

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        async for entry in watcher:
            if entry is None:
                self._changed.set()
                continue
            if entry.operation is None:
                self.entries[entry.key] = entry.value or b""
            else:
                self.entries.pop(entry.key, None)
            self._changed.set()

    async def _contact(self, js: JetStreamContext) -> None:
        while True:
            try:
                mirror = (await js.stream_info(FLEET_STREAM)).mirror
                active = None if mirror is None else mirror.active
                self.since_contact = None if active is None or active < 0 else active / _NANOSECONDS
            except (NatsError, TimeoutError) as error:
                _log.debug("fleet mirror not read (%r)", error)
            await asyncio.sleep(self.refresh_seconds)

    async def _recompute_loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            started = time.perf_counter()
            self.recompute()
            _log.debug("fleet exposure worked out in %.2f s", time.perf_counter() - started)
            await asyncio.sleep(self.refresh_seconds)
