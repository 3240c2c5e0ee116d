"""The soak's bus figures read from a real nats-server: consumers and stored KiB per stream, and
per bucket its keys (a deleted key's marker counted), the most revisions of one key and its
entries."""

from __future__ import annotations

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import DRS_BUCKET, TOPOLOGY_BUCKET
from tests.campaign.soak import bus_measures
from tests.platform.bus_values import ESXI_HOST
from tests.platform.bus_values import node_placement as placement


async def test_the_soak_reads_each_bucket_s_keys_revisions_entries_and_consumers(bus: Bus) -> None:
    store = await bus.topology()
    for version in (1, 2, 3):
        await store.put_node(placement("node-1", "host-11", version=version))
    await store.put_host(ESXI_HOST)
    drs = await bus.js.key_value(DRS_BUCKET)
    await drs.put("outbox.drs.vc.e1", b"{}")
    await drs.delete("outbox.drs.vc.e1")

    async with store.watch():  # one ordered consumer while it runs
        measures = await bus_measures(bus)

    assert measures[f"kv-keys {TOPOLOGY_BUCKET}"] == 2
    assert measures[f"kv-revisions/key {TOPOLOGY_BUCKET}"] == 3
    assert measures[f"kv-entries {TOPOLOGY_BUCKET}"] == 4
    assert measures[f"consumers KV_{TOPOLOGY_BUCKET}"] == 1
    # The delete leaves its marker: the key stays counted.
    assert measures[f"kv-keys {DRS_BUCKET}"] == 1
    assert measures[f"kv-entries {DRS_BUCKET}"] == 1
    assert measures["consumers HOSTAFFINITY_EVENTS"] == 0
    # Stored bytes: four topology entries hold more than one DRS delete marker; nothing sent
    # on the events stream yet.
    assert measures[f"stream-KiB KV_{TOPOLOGY_BUCKET}"] > measures[f"stream-KiB KV_{DRS_BUCKET}"]
    assert measures["stream-KiB HOSTAFFINITY_EVENTS"] == 0
