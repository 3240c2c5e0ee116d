"""The settings of a durable JetStream consumer, as provisioning makes it
(`layout.provision_layout`) and a service checks it exists (`Bus.wait_for_layout`).

Durable with explicit ack, so a reader restarted mid-stream resumes at the first message it had
not acked; the server redelivers an unacked or refused message with a growing delay
(`backoff`), up to `max_deliver` times.
"""

import msgspec
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from hostaffinity.schema import EVENTS_STREAM, EVENTS_SUBJECT_PREFIX


class ConsumerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a service's durable consumer reads a stream (see nats.js.api.ConsumerConfig)."""

    durable: str
    stream: str = EVENTS_STREAM
    filter_subject: str = f"{EVENTS_SUBJECT_PREFIX}.>"
    # Time to ack before the server redelivers; with a backoff, the server uses backoff[0].
    ack_wait_seconds: float = 30.0
    # Delay before delivery n+1 after the n-th failed (or unacked) one; the last value repeats.
    backoff_seconds: tuple[float, ...] = (1.0, 5.0, 30.0, 120.0)
    max_deliver: int = 10
    max_ack_pending: int = 1000

    def __post_init__(self) -> None:
        # The server rejects a backoff as long as max_deliver: say so before connecting.
        if self.backoff_seconds and self.max_deliver <= len(self.backoff_seconds):
            raise ValueError(
                f"max_deliver ({self.max_deliver}) must exceed the number of backoff steps "
                f"({len(self.backoff_seconds)})"
            )

    def consumer_config(self) -> ConsumerConfig:
        """The server-side consumer this service reads through."""
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait_seconds,
            backoff=list(self.backoff_seconds) or None,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            filter_subject=self.filter_subject,
        )
