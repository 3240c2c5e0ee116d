"""kube-scheduler's extender wire format (k8s.io/kube-scheduler/extender/v1, types.go).

The Go structs carry no json tags, so the JSON keys are the Go field names (`Pod`, `NodeNames`,
`FailedAndUnresolvableNodes`, `PodUID`, ...). Node objects are kept as raw JSON: with
`nodeCacheCapable: false` kube-scheduler takes the nodes it gets back as they are, so the
extender returns the very bytes it was sent.

Only what a decision reads is built: a node's name (not its status, images or conditions), and of
a pod's annotations only the physical opt-in. Anything that does not decode (bad JSON, invalid
UTF-8 inside a string, nesting too deep, a wrong type) is one `MalformedRequest` with a short
reason, which the server answers with 400.
"""

from __future__ import annotations

import functools
from typing import Final

import msgspec

from hostaffinity.affinity.model import ObjectMeta, OwnerReference, Pod, PodSpec, PodStatus
from hostaffinity.schema import POD_PHYSICAL_ANTI_AFFINITY, UNDECODABLE

# A reason longer than this is cut: the answer goes into kube-scheduler's log and events.
REASON_LIMIT: Final = 200


class MalformedRequest(ValueError):
    """The body is not a request of the verb's type; the text says why, briefly."""


def _malformed(error: Exception) -> MalformedRequest:
    if isinstance(error, RecursionError):
        return MalformedRequest("JSON nested too deeply")
    if isinstance(error, UnicodeDecodeError):
        return MalformedRequest(f"invalid UTF-8 at byte {error.start}")
    return MalformedRequest(str(error)[:REASON_LIMIT])


class _Wire(msgspec.Struct, rename="pascal"):
    """Go field names on the wire; unknown keys ignored."""


class NodeList(msgspec.Struct):
    """A v1.NodeList whose items stay undecoded."""

    metadata: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"{}"))
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _OptIn(msgspec.Struct):
    """Of a pod's annotations, the one the engine reads; the others are skipped unbuilt."""

    physical: str | None = msgspec.field(default=None, name=POD_PHYSICAL_ANTI_AFFINITY)


class _PodMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: _OptIn = msgspec.field(default_factory=_OptIn)
    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)


class _WirePod(msgspec.Struct):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    def pod(self) -> Pod:
        meta = self.metadata
        physical = meta.annotations.physical
        annotations = {} if physical is None else {POD_PHYSICAL_ANTI_AFFINITY: physical}
        return Pod(
            metadata=ObjectMeta(
                name=meta.name,
                namespace=meta.namespace,
                uid=meta.uid,
                labels=meta.labels,
                annotations=annotations,
                owner_references=meta.owner_references,
            ),
            spec=self.spec,
            status=self.status,
        )


class ExtenderArgs(_Wire):
    """The body of a filter or prioritize call: names only when nodeCacheCapable is true."""

    pod: _WirePod
    # The NodeList as received (JSON null with nodeCacheCapable): read only as far as a
    # decision needs, and echoed untouched when every node passes.
    nodes: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    node_names: list[str] | None = None


class ExtenderFilterResult(_Wire):
    """Nodes that passed (in the form they were asked in) and why the others failed."""

    nodes: NodeList | msgspec.Raw | None = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] = msgspec.field(default_factory=dict)
    # Preemption cannot help these; kube-scheduler lets them win over FailedNodes.
    failed_and_unresolvable_nodes: dict[str, str] = msgspec.field(default_factory=dict)
    error: str = ""


class HostPriority(_Wire):
    """One node's score, 0..10 (extender/v1 MaxExtenderPriority)."""

    host: str
    score: int


class ExtenderBindingArgs(_Wire):
    """The body of a bind call: the pod and the node kube-scheduler chose."""

    pod_name: str
    pod_namespace: str
    pod_uid: str = msgspec.field(name="PodUID")
    node: str


class ExtenderBindingResult(_Wire):
    """An empty Error means the pod is bound."""

    error: str = ""


class _NodeMeta(msgspec.Struct):
    name: str = ""


class _NamedNode(msgspec.Struct):
    metadata: _NodeMeta = msgspec.field(default_factory=_NodeMeta)


class _NamedNodeList(msgspec.Struct):
    items: list[_NamedNode] = msgspec.field(default_factory=list)


_named_nodes = msgspec.json.Decoder(_NamedNodeList | None)
_node_list = msgspec.json.Decoder(NodeList)


class AskedNodes:
    """The candidate nodes of a call: names (nodeCacheCapable) or the NodeList as received.

    A NodeList's names are read (skipping everything else in the nodes) only when asked for,
    and its items split only when some node fails: a pass-all answer echoes the bytes as
    received.
    """

    def __init__(self, names: list[str] | None, nodes: msgspec.Raw | None = None) -> None:
        self._names = names
        self._nodes = nodes

    @functools.cached_property
    def names(self) -> list[str]:
        if self._names is not None:
            return self._names
        listed = _named_nodes.decode(self._nodes) if self._nodes is not None else None
        return [item.metadata.name for item in listed.items] if listed is not None else []

    def everyone(self) -> tuple[msgspec.Raw | None, list[str] | None]:
        """Every asked node, in the form it was asked in."""
        if self._nodes is None:
            return None, self.names
        return self._nodes, None

    def answer(self, passed: list[str]) -> tuple[NodeList | None, list[str] | None]:
        """`passed` (a subset of `names`) in the form the nodes were asked in."""
        if self._nodes is None:
            return None, passed
        listed = _node_list.decode(self._nodes)
        keep = set(passed)
        pairs = zip(listed.items, self.names, strict=True)
        return NodeList(listed.metadata, [raw for raw, name in pairs if name in keep]), None


def asked_nodes(args: ExtenderArgs) -> AskedNodes:
    """The candidates from NodeNames (nodeCacheCapable) or from the full NodeList."""
    if bytes(args.nodes) == b"null":
        return AskedNodes(args.node_names or [])
    asked = AskedNodes(None, args.nodes)
    _ = asked.names  # a malformed NodeList is the request's fault: found here, not later
    return AskedNodes(args.node_names) if args.node_names is not None else asked


_args_decoder = msgspec.json.Decoder(ExtenderArgs)
_binding_decoder = msgspec.json.Decoder(ExtenderBindingArgs)
_encoder = msgspec.json.Encoder()


def decode_args(body: bytes) -> tuple[Pod, AskedNodes]:
    """The pod and candidate nodes of a filter or prioritize body; raises MalformedRequest.

    The body must be UTF-8 throughout (JSON is, RFC 8259): the node items are kept raw and
    echoed in the answer, so a byte msgspec skips unread (in a key of a node's status) would
    otherwise come back in a 200 that is not JSON (found by tests/integration/test_http_fuzz.py).
    """
    try:
        body.decode("utf-8")
        args = _args_decoder.decode(body)
        return args.pod.pod(), asked_nodes(args)
    except UNDECODABLE as error:
        raise _malformed(error) from error


def decode_binding(body: bytes) -> ExtenderBindingArgs:
    """Decode a bind body; raises MalformedRequest."""
    try:
        return _binding_decoder.decode(body)
    except UNDECODABLE as error:
        raise _malformed(error) from error


def encode(answer: ExtenderFilterResult | ExtenderBindingResult | list[HostPriority]) -> bytes:
    """JSON bytes of an answer, every key present as Go's encoding/json writes it."""
    return _encoder.encode(answer)
