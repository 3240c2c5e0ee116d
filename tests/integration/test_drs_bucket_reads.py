"""Reads of `hostaffinity-drs` hold every value the bucket held when the read began, also when
the server's deliveries reach the client after its API replies (tests/platform/
nats_delivery_lag.py): the CLI's (`explain`, `status` show the ownership records) and the
drs-translator's at its start (its ownership records: only a rule with one is ever edited).
"""

import msgspec

from hostaffinity.cli.reading import drs_records
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import DRS_BUCKET
from hostaffinity.schema.drs import DrsOwnership
from hostaffinity.schema.names import drs_rule_key

RECORDS = 5


def record(index: int) -> DrsOwnership:
    return DrsOwnership(
        vcenter="vc",
        cluster_moid="domain-c1",
        name=f"hostaffinity-apart-{index}",
        kind="vm-anti-affinity",
        vms=["vm-1", "vm-2"],
        pods=[f"default/web-{index}"],
        state="applied",
    )


async def write_records(bus: Bus) -> list[DrsOwnership]:
    """RECORDS ownership records in the provisioned bucket, as the drs-translator writes them."""
    await bus.provision()
    kv = await bus.js.key_value(DRS_BUCKET)
    written = [record(i) for i in range(RECORDS)]
    for each in written:
        await kv.put(
            drs_rule_key(each.vcenter, each.cluster_moid, each.name), msgspec.json.encode(each)
        )
    return written


async def test_drs_records_wait_for_values_delivered_after_the_api_reply(
    bus: Bus, lagging_reader: Bus
) -> None:
    """nats-py ends a watch's initial values when consumer_info says nothing is pending and no
    delivery has been read yet; a reply that overtook the deliveries made `explain pod` show no
    DRS rule for a pod that had one."""
    written = await write_records(bus)

    found = await drs_records(lagging_reader)

    assert sorted(found, key=lambda r: r.name) == written


async def test_the_translator_loads_records_delivered_after_the_api_reply(
    bus: Bus, lagging_reader: Bus
) -> None:
    written = await write_records(bus)
    records = OwnershipRecords(await lagging_reader.js.key_value(DRS_BUCKET), "vc", "c")

    await records.load()

    assert sorted(records.of("domain-c1").values(), key=lambda r: r.name) == written
