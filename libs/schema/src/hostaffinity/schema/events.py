"""Events on the `HOSTAFFINITY_EVENTS` stream: a tagged union decoded by one decoder."""

import hashlib
from typing import Final

import msgspec

from hostaffinity.schema.version import SCHEMA_VERSION


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Fields every event carries. `id` is deterministic and doubles as `Nats-Msg-Id`."""

    id: str
    schema_version: int = SCHEMA_VERSION
    occurred_at: str
    source: str


class VmMoved(Event, frozen=True, kw_only=True, tag="vm.moved"):
    """A node's VM now runs on another ESXi host (vMotion, manual or by DRS)."""

    node: str
    vm_moid: str
    from_host_moid: str
    from_host_name: str
    to_host_moid: str
    to_host_name: str
    version: int


class NodePlaced(Event, frozen=True, kw_only=True, tag="node.placed"):
    """A node was matched to its VM for the first time (a node joined, or a restart found it)."""

    node: str
    vm_moid: str
    host_moid: str
    host_name: str
    cluster_name: str
    datacenter: str
    matched_by: str
    version: int


class NodeLabelled(Event, frozen=True, kw_only=True, tag="node.labelled"):
    """The node's labels were patched to match its placement."""

    node: str
    labels: dict[str, str]
    version: int


class NodeUnmatched(Event, frozen=True, kw_only=True, tag="node.unmatched"):
    """A node could not be matched to exactly one VM; `reason` says why in words."""

    node: str
    reason: str
    candidates: list[str] = []


class ExtenderDecision(Event, frozen=True, kw_only=True, tag="extender.decision"):
    """What the scheduler-extender answered kube-scheduler for one pod (a sample, not all).

    `verb` is filter, prioritize or bind; `outcome` one of feasible, unschedulable, scored,
    bound, error. `rejections` counts the failed nodes per reason; `node` is the bind target or
    the best-scored node.
    """

    verb: str
    pod: str
    pod_uid: str
    outcome: str
    nodes_asked: int = 0
    nodes_passed: int = 0
    node: str = ""
    rejections: dict[str, int] = {}
    message: str = ""


TopologyEvent = VmMoved | NodePlaced | NodeLabelled | NodeUnmatched | ExtenderDecision

EVENT_TYPES: Final[tuple[str, ...]] = (
    "vm.moved",
    "node.placed",
    "node.labelled",
    "node.unmatched",
    "extender.decision",
)

# What decoding untrusted JSON bytes raises: msgspec's errors (ValidationError included), invalid
# UTF-8 inside a string, nesting deeper than the interpreter allows. All mean "bad input".
UNDECODABLE: Final = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[TopologyEvent] = msgspec.json.Decoder(TopologyEvent)


def encode_event(event: Event) -> bytes:
    """JSON bytes of an event, with its `type` tag."""
    return _encoder.encode(event)


def decode_event(data: bytes) -> TopologyEvent:
    """Decode any known event; raises one of UNDECODABLE on bad input."""
    return _decoder.decode(data)


def event_id(event_type: str, *parts: object) -> str:
    """A deterministic id: the same fact always gets the same id, so JetStream drops repeats."""
    text = "\x1f".join([event_type, *(str(p) for p in parts)])
    return f"{event_type}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:24]}"
