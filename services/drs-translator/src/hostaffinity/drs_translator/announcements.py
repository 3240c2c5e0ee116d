"""`drs.rules.applied` survives a crash: the event is kept in the `hostaffinity-drs` bucket
(`outbox.<vcenter>.<event-id>`) from before the ownership records are confirmed until NATS
acknowledged it, so a translator killed in between sends it on restart instead of losing it.

The runtime's outbox keeps events in memory only, which is right for events that can be made
again; a batch of DRS writes cannot: on restart the records show the rules as ours and applied,
and nothing would say that they were. A kept event is sent with its own id, so a copy NATS had
already stored is dropped as a duplicate (within the stream's duplicate window).
"""

import logging

import msgspec
from nats.js.kv import KeyValue

from hostaffinity.drs_translator.apply_steps import DRS_APPLY_PATH
from hostaffinity.runtime.bus.kv import current_entries
from hostaffinity.schema import UNDECODABLE, DrsRulesApplied, Event, drs_outbox_key

_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(DrsRulesApplied)


class KeptAnnouncements:
    """The `drs.rules.applied` events of one vCenter not yet acknowledged by NATS."""

    def __init__(self, kv: KeyValue, vcenter: str) -> None:
        self._kv = kv
        self._vcenter = vcenter
        self._kept: set[str] = set()

    async def keep(self, event: DrsRulesApplied) -> None:
        """Store the event before what it announces is confirmed."""
        await self._kv.put(drs_outbox_key(self._vcenter, event.id), _encoder.encode(event))
        self._kept.add(event.id)

    async def forget(self, event: Event) -> None:
        """Drop a kept event NATS acknowledged (the outbox's `on_published`)."""
        if event.id not in self._kept:
            return
        DRS_APPLY_PATH.checkpoint("published")
        await self._kv.delete(drs_outbox_key(self._vcenter, event.id))
        self._kept.discard(event.id)

    async def load(self) -> list[DrsRulesApplied]:
        """Every event kept by an earlier run, oldest first; they are kept until forgotten."""
        found: list[DrsRulesApplied] = []
        prefix = drs_outbox_key(self._vcenter, "")
        # Not nats-py's end-of-values marker, which can come before the values (current_entries).
        for entry in await current_entries(self._kv, prefix):
            try:
                found.append(_decoder.decode(entry.value or b""))
            except UNDECODABLE as err:
                _log.error("kept announcement %s does not decode; dropped: %s", entry.key, err)
                await self._kv.delete(entry.key)
        self._kept.update(event.id for event in found)
        return sorted(found, key=lambda event: event.occurred_at)
