"""Parking messages a service cannot use in `hostaffinity.dlq.<service>`, with the reason."""

from datetime import UTC, datetime

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import metrics

from hostaffinity.runtime.publishing import publish
from hostaffinity.schema import DeadLetter, dlq_subject

_encoder = msgspec.json.Encoder()
_parked = metrics.get_meter(__name__).create_counter(
    "hostaffinity.bus.dead_letters",
    unit="{message}",
    description="Messages a service could not use and parked in HOSTAFFINITY_DLQ.",
)


class DeadLetterQueue:
    """One service's dead-letter subject; what lands there is kept, counted, and out of the way."""

    def __init__(self, js: JetStreamContext, service: str) -> None:
        self._js = js
        self._service = service
        self._subject = dlq_subject(service)

    async def park(self, msg: Msg, reason: str) -> None:
        """Store a JetStream message with the reason; a redelivered copy is stored only once."""
        meta = msg.metadata
        letter = DeadLetter(
            service=self._service,
            subject=msg.subject,
            reason=reason,
            payload=msg.data,
            received_at=datetime.now(UTC).isoformat(),
        )
        await publish(
            self._js,
            self._subject,
            _encoder.encode(letter),
            msg_id=f"dlq-{self._service}-{meta.stream}-{meta.sequence.stream}",
        )
        _parked.add(1, {"service": self._service, "stream": meta.stream})
