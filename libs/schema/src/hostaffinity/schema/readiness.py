"""What a service's `/readyz` says, part by part, as the leader of a Lease-gated service also
writes it on its Lease (annotation `hostaffinity.io/readiness`) for `hostaffinity status`.

A part *passes*, *fails* (it holds readiness back) or is *degraded*: it fails, but the service
stays ready because another vCenter of several is served (a partial outage, reported and not
hidden, and not the whole service taken out).
"""

from typing import Literal

import msgspec

PartState = Literal["passes", "fails", "degraded"]


class ReadinessPart(msgspec.Struct, frozen=True, kw_only=True):
    """One part of /readyz; `detail` says why it does not pass ("" when it does)."""

    name: str
    state: PartState
    detail: str = ""


class ServiceReadiness(msgspec.Struct, frozen=True, kw_only=True):
    """A replica's readiness at `at`: ready or not, and every part that does not pass (a Lease
    annotation stays small; /readyz lists the passing parts too)."""

    ready: bool
    parts: list[ReadinessPart] = msgspec.field(default_factory=list)
    at: str = ""


def encode_readiness(readiness: ServiceReadiness) -> str:
    return msgspec.json.encode(readiness).decode()


def decode_readiness(text: str) -> ServiceReadiness:
    """Raises msgspec.DecodeError for what no service wrote."""
    return msgspec.json.decode(text, type=ServiceReadiness)
