"""Ownership records in the `hostaffinity-drs` bucket: what of vCenter's DRS state is ours.

Read whole at start (one watch replays every current record), then written through: the copy in
memory is always what the bucket holds. A record that does not decode is logged and left out,
so its rule counts as not ours and is never touched.
"""

import msgspec
from nats.js.kv import KeyValue

from hostaffinity.runtime.bus.kv import decoded_values
from hostaffinity.schema import DrsOwnership, drs_rule_key
from hostaffinity.schema.names import DRS_RULE_KEY_PREFIX

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(DrsOwnership)


class OwnershipRecords:
    """The records of one vCenter, by cluster moid and then rule or group name."""

    def __init__(self, kv: KeyValue, vcenter: str, cluster: str) -> None:
        self._kv = kv
        self._vcenter = vcenter
        self._cluster = cluster  # this install's cluster identity, stamped on what it writes
        self.by_cluster: dict[str, dict[str, DrsOwnership]] = {}

    async def load(self) -> None:
        """Replace the copy in memory with every record of our vCenter the bucket holds (one
        that does not decode is logged and left out: its rule stays untouched)."""
        loaded: dict[str, dict[str, DrsOwnership]] = {}
        # Not nats-py's end-of-values marker, which can come before the values (current_entries).
        for record in await decoded_values(
            self._kv, DRS_RULE_KEY_PREFIX, _decoder, "ownership record"
        ):
            if record.vcenter == self._vcenter:
                loaded.setdefault(record.cluster_moid, {})[record.name] = record
        self.by_cluster = loaded

    def of(self, cluster_moid: str) -> dict[str, DrsOwnership]:
        return self.by_cluster.get(cluster_moid, {})

    def held(self) -> int:
        """How many of our rules are held for a host's maintenance now."""
        return sum(
            1
            for names in self.by_cluster.values()
            for record in names.values()
            if record.held_because
        )

    async def put(self, record: DrsOwnership) -> None:
        if record.cluster != self._cluster:
            record = msgspec.structs.replace(record, cluster=self._cluster)
        key = drs_rule_key(record.vcenter, record.cluster_moid, record.name)
        await self._kv.put(key, _encoder.encode(record))
        self.by_cluster.setdefault(record.cluster_moid, {})[record.name] = record

    async def delete(self, cluster_moid: str, name: str) -> None:
        await self._kv.delete(drs_rule_key(self._vcenter, cluster_moid, name))
        names = self.by_cluster.get(cluster_moid, {})
        names.pop(name, None)
        if not names:  # a cluster with nothing of ours left is no longer visited
            self.by_cluster.pop(cluster_moid, None)
