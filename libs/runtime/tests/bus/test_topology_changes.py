"""Turning topology bucket entries into typed changes."""

import msgspec
import pytest
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from hostaffinity.runtime.bus.kv import HostChange, NodeChange, topology_change
from hostaffinity.schema import EsxiHost, NodePlacement

PLACEMENT = NodePlacement(
    node="worker-1.example.com",
    vm_moid="vm-1",
    bios_uuid="b",
    instance_uuid="i",
    host_moid="host-1",
    host_name="esx-1",
    host_label="esx-1",
    cluster_moid="domain-c1",
    cluster_name="c1",
    datacenter="dc",
    vcenter="vc",
    observed_at="2026-01-01T00:00:00+00:00",
    version=3,
)
HOST = EsxiHost(
    moid="host-1",
    name="esx-1",
    label="esx-1",
    cluster_moid="domain-c1",
    cluster_name="c1",
    datacenter="dc",
    connection_state="connected",
    in_maintenance_mode=True,
)


def entry(key: str, value: bytes, operation: str | None = None) -> KeyValue.Entry:
    return KeyValue.Entry(
        bucket="hostaffinity-topology",
        key=key,
        value=value,
        revision=9,
        delta=0,
        created=None,
        operation=operation,
    )


@pytest.mark.parametrize(
    ("bucket_entry", "change"),
    [
        (
            entry("node.worker-1.example.com", msgspec.json.encode(PLACEMENT)),
            NodeChange(node="worker-1.example.com", placement=PLACEMENT, revision=9),
        ),
        (
            entry("node.worker-1.example.com", b"", KV_DEL),
            NodeChange(node="worker-1.example.com", placement=None, revision=9),
        ),
        (
            entry("host.host-1", msgspec.json.encode(HOST)),
            HostChange(moid="host-1", host=HOST, revision=9),
        ),
        (
            entry("host.host-1", b"", KV_PURGE),
            HostChange(moid="host-1", host=None, revision=9),
        ),
        (entry("lease.node-labeller", b"{}"), None),
    ],
    ids=["node-put", "node-delete", "host-put", "host-purge", "other-key"],
)
def test_entry_becomes_typed_change(
    bucket_entry: KeyValue.Entry, change: NodeChange | HostChange | None
) -> None:
    assert topology_change(bucket_entry) == change


def test_value_of_the_wrong_shape_raises_a_decode_error() -> None:
    with pytest.raises(msgspec.ValidationError, match="vm_moid"):
        topology_change(entry("node.worker-1", b'{"node": "worker-1"}'))
