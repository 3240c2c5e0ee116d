"""The one place where every message, KV value, subject and label key of hostaffinity is defined.

Services and outside subscribers import names from here so that they always agree.
"""

from hostaffinity.schema.events import (
    EVENT_TYPES,
    UNDECODABLE,
    Event,
    ExtenderDecision,
    NodeLabelled,
    NodePlaced,
    NodeUnmatched,
    TopologyEvent,
    VmMoved,
    decode_event,
    encode_event,
    event_id,
)
from hostaffinity.schema.labels import label_value
from hostaffinity.schema.names import (
    ANNOTATION_ESXI_HOST_NAME,
    ANNOTATION_VM,
    DLQ_STREAM,
    DLQ_SUBJECT_PREFIX,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    LABEL_DATACENTER,
    LABEL_ESXI_HOST,
    LABEL_LEGACY_HOST,
    LABEL_VSPHERE_CLUSTER,
    POD_PHYSICAL_ANTI_AFFINITY,
    TOPOLOGY_BUCKET,
    dlq_subject,
    event_subject,
    host_key,
    node_key,
)
from hostaffinity.schema.timestamps import utc_timestamp
from hostaffinity.schema.topology import DeadLetter, EsxiHost, NodePlacement
from hostaffinity.schema.version import SCHEMA_VERSION

__all__ = [
    "ANNOTATION_ESXI_HOST_NAME",
    "ANNOTATION_VM",
    "DLQ_STREAM",
    "DLQ_SUBJECT_PREFIX",
    "EVENTS_STREAM",
    "EVENTS_SUBJECT_PREFIX",
    "EVENT_TYPES",
    "LABEL_DATACENTER",
    "LABEL_ESXI_HOST",
    "LABEL_LEGACY_HOST",
    "LABEL_VSPHERE_CLUSTER",
    "POD_PHYSICAL_ANTI_AFFINITY",
    "SCHEMA_VERSION",
    "TOPOLOGY_BUCKET",
    "UNDECODABLE",
    "DeadLetter",
    "EsxiHost",
    "Event",
    "ExtenderDecision",
    "NodeLabelled",
    "NodePlaced",
    "NodePlacement",
    "NodeUnmatched",
    "TopologyEvent",
    "VmMoved",
    "decode_event",
    "dlq_subject",
    "encode_event",
    "event_id",
    "event_subject",
    "host_key",
    "label_value",
    "node_key",
    "utc_timestamp",
]
