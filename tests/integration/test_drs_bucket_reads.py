"""The CLI's reads of the buckets (`explain`, `status`, `topology` read the DRS ownership records
and HA settings from `hostaffinity-drs`) hold every value the bucket held when the read began,
also when the server's deliveries reach the client after its API replies
(tests/platform/nats_delivery_lag.py)."""

import msgspec

from hostaffinity.cli.reading import drs_records
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


async def test_drs_records_wait_for_values_delivered_after_the_api_reply(
    bus: Bus, lagging_reader: Bus
) -> None:
    """nats-py ends a watch's initial values when consumer_info says nothing is pending and no
    delivery has been read yet; a reply that overtook the deliveries made `explain pod` show no
    DRS rule for a pod that had one."""
    await bus.provision()
    kv = await bus.js.key_value(DRS_BUCKET)
    written = [record(i) for i in range(RECORDS)]
    for each in written:
        await kv.put(
            drs_rule_key(each.vcenter, each.cluster_moid, each.name), msgspec.json.encode(each)
        )

    found = await drs_records(lagging_reader)

    assert sorted(found, key=lambda r: r.name) == written
