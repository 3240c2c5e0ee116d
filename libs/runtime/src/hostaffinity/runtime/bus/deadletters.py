"""Parking messages a service cannot use in `hostaffinity.dlq.<service>`, with the reason.

A parked copy must fit in one NATS message (max_payload, 1 MiB by default) after JSON's base64
grows it by a third, so a payload over `PARKED_PAYLOAD_LIMIT` is cut to that and its original
size recorded: what a message was and why it was refused is kept, even when the whole is not.
"""

from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from opentelemetry import metrics

from hostaffinity.runtime.bus.publishing import publish
from hostaffinity.schema import DeadLetter, dlq_subject

PARKED_PAYLOAD_LIMIT = 256 * 1024

_encoder = msgspec.json.Encoder()
_parked = metrics.get_meter(__name__).create_counter(
    "hostaffinity_bus_dead_letters",
    unit="{message}",
    description="Messages a service could not use and parked in HOSTAFFINITY_DLQ.",
)


class DeadLetterQueue:
    """One service's dead-letter subject; what lands there is kept, counted, and out of the way."""

    def __init__(self, js: JetStreamContext, service: str, stream: str) -> None:
        self._js = js
        self._service = service
        self._subject = dlq_subject(service)
        # Served at 0 from the start, so an alert's increase() sees the first parked message.
        _parked.add(0, {"service": service, "stream": stream})

    async def park_value(
        self, stream: str, subject: str, revision: int, payload: bytes, reason: str
    ) -> None:
        """Store a bucket value (`subject` is its `$KV.<bucket>.<key>`) with the reason; the same
        revision, met again by a later watch, is stored only once."""
        size = len(payload)
        if size > PARKED_PAYLOAD_LIMIT:
            reason = f"{reason} (payload cut to its first {PARKED_PAYLOAD_LIMIT} of {size} bytes)"
        letter = DeadLetter(
            service=self._service,
            subject=subject,
            reason=reason,
            payload=payload[:PARKED_PAYLOAD_LIMIT],
            received_at=datetime.now(UTC).isoformat(),
            payload_size=size,
        )
        await publish(
            self._js,
            self._subject,
            _encoder.encode(letter),
            msg_id=f"dlq-{self._service}-{stream}-{revision}",
        )
        _parked.add(1, {"service": self._service, "stream": stream})
