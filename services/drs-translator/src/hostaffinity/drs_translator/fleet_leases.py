"""Which fleet rules this install may write: its leases on the fleet hub, one per rule
(runtime/bus/hub_leases.py; the value is the schema's `FleetRuleLease`).

The cycles say which rules they want (`want`, per vCenter) and ask which are held (`holds`);
`run` does the I/O, every third of the lease bucket's max age: it renews what is held, creates
what is wanted and free (or held under this install's own identity, by an earlier run of it), and
lets go of what is no longer wanted, deleting the key so that another install need not wait for it
to expire. Every write expects the revision read or written last: when two installs ask at once,
the hub takes one write and refuses the other.

A lease counts as held for two thirds of the max age after its last successful renewal, so the
holder stops writing the rule a third of the max age before the hub could free the key for
another: no two installs ever write it, and while the hub is away nobody does. The max age is the
bucket's own (the hub's provisioning sets it); a bucket without one would let a crashed holder
keep the rule for ever, so no lease is taken there, and the log says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import msgspec
from nats.errors import Error as NatsError

from hostaffinity.runtime.bus.hub_leases import HubLeases, LeaseTaken
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.schema import UNDECODABLE, FleetRuleLease, utc_timestamp

_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(FleetRuleLease)
# Until the bucket's max age is known (the hub away at start), ask again this often.
RETRY_SECONDS: Final = 2.0
HUB_AWAY: Final = (NatsError, TimeoutError)


@dataclass(frozen=True, slots=True)
class LeaseSubject:
    """What a lease is for: the fleet rule `rule` of `group` in one vSphere cluster."""

    vcenter_uuid: str
    cluster_moid: str
    group: str
    rule: str


@dataclass(slots=True)
class _Held:
    subject: LeaseSubject
    revision: int
    renewed_at: float
    acquired_at: str


class FleetLeases:
    """This install's fleet rule leases; `wake` is called when one was won or lost."""

    def __init__(
        self,
        store: HubLeases,
        holder: str,
        install: str,
        *,
        wake: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._holder = holder
        self._install = install
        self._wake = wake
        self._clock = clock
        self._wanted: dict[str, dict[str, LeaseSubject]] = {}
        self._held: dict[str, _Held] = {}
        self.duration_seconds: float | None = None
        self._said: str = ""

    def want(self, scope: str, wanted: Mapping[str, LeaseSubject]) -> None:
        """The leases one vCenter's cycle wants now, by key (replacing what it wanted before)."""
        self._wanted[scope] = dict(wanted)

    def holds(self, key: str) -> bool:
        held = self._held.get(key)
        return held is not None and self._clock() < held.renewed_at + self._valid_for()

    def held(self) -> list[str]:
        """The keys held now, sorted."""
        return sorted(key for key in self._held if self.holds(key))

    def _valid_for(self) -> float:
        return 2 * (self.duration_seconds or 0.0) / 3

    def _all_wanted(self) -> dict[str, LeaseSubject]:
        return {key: s for wanted in self._wanted.values() for key, s in wanted.items()}

    async def run(self) -> None:
        """Renew, take and let go until cancelled; then let go of every lease held."""
        try:
            while True:
                await self.tick()
                interval = (self.duration_seconds or 0.0) / 3 or RETRY_SECONDS
                await asyncio.sleep(interval)
        finally:
            await asyncio.shield(self.release_all())

    async def tick(self) -> None:
        """One round: let go of what is not wanted, renew what is held, take what is wanted."""
        if not await self._know_duration():
            return
        before = set(self.held())
        wanted = self._all_wanted()
        for key in sorted(self._held):
            if key not in wanted:
                await self._release(key)
            else:
                await self._renew(key)
        for key, subject in sorted(wanted.items()):
            if key not in self._held:
                await self._take(key, subject)
        if set(self.held()) != before:
            self._wake()

    async def release_all(self) -> None:
        for key in sorted(self._held):
            await self._release(key)

    async def _know_duration(self) -> bool:
        if self.duration_seconds:
            return True
        try:
            duration = await self._store.max_age_seconds()
        except HUB_AWAY as error:
            raise_if_cancel_requested()
            self._say(
                f"the fleet hub's lease bucket is out of reach ({error!r}): no fleet rule is "
                "written until it answers"
            )
            return False
        if duration <= 0:
            self._say(
                "the fleet hub's lease bucket has no max age: a crashed holder would keep its "
                "fleet rules for ever, so none is taken (the hub's provisioning sets one)"
            )
            return False
        self.duration_seconds = duration
        return True

    def _say(self, text: str) -> None:
        if text != self._said:
            _log.warning("%s", text)
            self._said = text

    def _value(self, subject: LeaseSubject, acquired_at: str) -> bytes:
        return _encoder.encode(
            FleetRuleLease(
                holder=self._holder,
                install=self._install,
                vcenter_uuid=subject.vcenter_uuid,
                cluster_moid=subject.cluster_moid,
                group=subject.group,
                rule=subject.rule,
                acquired_at=acquired_at,
                renewed_at=utc_timestamp(),
                duration_seconds=self.duration_seconds or 0.0,
            )
        )

    async def _take(self, key: str, subject: LeaseSubject) -> None:
        """Create the key where it is free, or take back one this install's earlier run held."""
        try:
            current = await self._store.read(key)
            if current.value is not None and self._holder_of(key, current.value) != self._holder:
                return
            sent = self._clock()
            now = utc_timestamp()
            revision = await self._store.write(key, self._value(subject, now), current.revision)
        except LeaseTaken:
            return  # another install was quicker
        except HUB_AWAY as error:
            raise_if_cancel_requested()
            _log.info("lease %s not taken, the hub did not answer: %r", key, error)
            return
        self._held[key] = _Held(subject, revision, sent, now)
        _log.info("took the lease of fleet rule %s (%s)", subject.rule, key)

    async def _renew(self, key: str) -> None:
        held = self._held[key]
        sent = self._clock()
        try:
            held.revision = await self._store.write(
                key, self._value(held.subject, held.acquired_at), held.revision
            )
        except LeaseTaken:
            del self._held[key]
            _log.warning("the lease of fleet rule %s was taken by another install", key)
            return
        except HUB_AWAY as error:
            raise_if_cancel_requested()
            if not self.holds(key):
                del self._held[key]
                _log.warning("the lease of fleet rule %s lapsed, the hub away: %r", key, error)
            return
        held.renewed_at = sent

    async def _release(self, key: str) -> None:
        held = self._held.pop(key)
        try:
            await self._store.delete(key, held.revision)
        except (LeaseTaken, *HUB_AWAY) as error:
            _log.info("lease %s left to expire: %r", key, error)
            return
        _log.info("let go of the lease of fleet rule %s", held.subject.rule)

    def _holder_of(self, key: str, value: bytes) -> str:
        try:
            return _decoder.decode(value).holder
        except UNDECODABLE as error:
            _log.warning("lease %s holds no lease value (%s); left to expire", key, error)
            return ""
