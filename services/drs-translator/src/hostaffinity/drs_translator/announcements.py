"""`drs.rules.applied` survives a crash: the event is kept in the `hostaffinity-drs` bucket
(`outbox.drs.<vcenter>`, one list per vCenter) from before the ownership records are confirmed
until NATS acknowledged it, so a translator killed in between sends it on restart instead of
losing it.

The runtime's outbox keeps events in memory only, which is right for events that can be made
again; a batch of DRS writes cannot: on restart the records show the rules as ours and applied,
and nothing would say that they were. A kept event is sent with its own id, so a copy NATS had
already stored is dropped as a duplicate (within the stream's duplicate window).

One key per vCenter, not one per event: a deleted KV key leaves a delete marker for good in a
bucket without a max age, so a key per event grew the bucket by one key per apply (found by the
campaign's soak).
"""

import asyncio
import logging

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from hostaffinity.drs_translator.apply_steps import DRS_APPLY_PATH
from hostaffinity.runtime.bus.kv import current_entries
from hostaffinity.schema import (
    UNDECODABLE,
    DrsRulesApplied,
    Event,
    drs_outbox_key,
    legacy_drs_outbox_prefix,
)
from hostaffinity.schema.names import DRS_OUTBOX_KEY_PREFIX, NODE_OUTBOX_KEY_PREFIX

_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(list[DrsRulesApplied])
_legacy_decoder = msgspec.json.Decoder(DrsRulesApplied)


class KeptAnnouncements:
    """The `drs.rules.applied` events of one vCenter not yet acknowledged by NATS."""

    def __init__(self, kv: KeyValue, vcenter: str) -> None:
        self._kv = kv
        self._vcenter = vcenter
        self._key = drs_outbox_key(vcenter)
        self._kept: dict[str, DrsRulesApplied] = {}
        # Each write stores the list as it is when written: serialised, so that an older list
        # never lands after a newer one and brings back an event already forgotten.
        self._writing = asyncio.Lock()

    async def keep(self, event: DrsRulesApplied) -> None:
        """Store the event before what it announces is confirmed."""
        self._kept[event.id] = event
        async with self._writing:
            await self._kv.put(self._key, _encoder.encode(list(self._kept.values())))

    async def forget(self, event: Event) -> None:
        """Drop a kept event NATS acknowledged (the outbox's `on_published`)."""
        if self._kept.pop(event.id, None) is None:
            return
        DRS_APPLY_PATH.checkpoint("published")
        async with self._writing:
            if self._kept:
                await self._kv.put(self._key, _encoder.encode(list(self._kept.values())))
            else:
                await self._kv.delete(self._key)

    async def load(self) -> list[DrsRulesApplied]:
        """Every event kept by an earlier run, oldest first; they are kept until forgotten.
        Events a 0.1.0 translator kept one key each are moved into this vCenter's list."""
        found = {event.id: event for event in await self._stored()}
        legacy = await self._legacy()
        found.update((event.id, event) for event in legacy.values())
        self._kept.update(found)
        if legacy:
            async with self._writing:
                await self._kv.put(self._key, _encoder.encode(list(self._kept.values())))
            for key in legacy:
                await self._kv.delete(key)
        return sorted(self._kept.values(), key=lambda event: event.occurred_at)

    async def _stored(self) -> list[DrsRulesApplied]:
        try:
            entry = await self._kv.get(self._key)
        except KeyNotFoundError:  # never kept, or deleted: nothing waits
            return []
        try:
            return _decoder.decode(entry.value or b"")
        except UNDECODABLE as err:
            _log.error("kept announcements %s do not decode; dropped: %s", self._key, err)
            await self._kv.delete(self._key)
            return []

    async def _legacy(self) -> dict[str, DrsRulesApplied]:
        """0.1.0's per-event keys of this vCenter, by key (never this version's own keys)."""
        found: dict[str, DrsRulesApplied] = {}
        # Not nats-py's end-of-values marker, which can come before the values (current_entries).
        for entry in await current_entries(self._kv, legacy_drs_outbox_prefix(self._vcenter)):
            if entry.key.startswith((DRS_OUTBOX_KEY_PREFIX, NODE_OUTBOX_KEY_PREFIX)):
                continue
            try:
                found[entry.key] = _legacy_decoder.decode(entry.value or b"")
            except UNDECODABLE as err:
                _log.error("kept announcement %s does not decode; dropped: %s", entry.key, err)
                await self._kv.delete(entry.key)
        return found
