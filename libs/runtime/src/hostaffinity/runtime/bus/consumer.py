"""A durable JetStream consumer: decode, handle, ack; park what cannot be used; never stop.

The consumer itself is made by provisioning (`layout.provision_layout`), from the same
`ConsumerSettings`; the service only binds to it.

The consumer is durable with explicit ack, so a service restarted mid-stream resumes at the first
message it had not acked. A message that does not decode is parked in the DLQ and acked (a retry
cannot make it decode): bad JSON, invalid UTF-8, nesting too deep, a wrong type, whatever its
size. A handler failure is retried with a growing delay (`backoff`); on the
last allowed delivery the message is parked too, so nothing is dropped silently.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from hostaffinity.runtime.bus.deadletters import DeadLetterQueue
from hostaffinity.runtime.process.cancellation import raise_if_cancel_requested
from hostaffinity.runtime.process.telemetry import extract_trace_context
from hostaffinity.schema import EVENTS_STREAM, EVENTS_SUBJECT_PREFIX, UNDECODABLE

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

_T = TypeVar("_T")
Handler = Callable[[_T], Awaitable[None]]


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
    batch: int = 64
    fetch_timeout_seconds: float = 5.0

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

    def redelivery_delay(self, delivered: int) -> float:
        """Seconds to wait before redelivering a message that failed on delivery `delivered`."""
        if not self.backoff_seconds:
            return self.ack_wait_seconds
        return self.backoff_seconds[min(delivered, len(self.backoff_seconds)) - 1]


class DurableConsumer(Generic[_T]):
    """Runs `handler` on every message of a durable consumer until cancelled.

    `decode` turns bytes into the handler's type and raises one of `UNDECODABLE` on bad input,
    as `hostaffinity.schema.decode_event` does.
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        service: str,
        settings: ConsumerSettings,
        decode: Callable[[bytes], _T],
        handler: Handler[_T],
        retry_seconds: float = 1.0,
    ) -> None:
        self._js = js
        self._settings = settings
        self._decode = decode
        self._handler = handler
        self._dead_letters = DeadLetterQueue(js, service, settings.stream)
        self._retry_seconds = retry_seconds

    async def run(self) -> None:
        """Fetch and handle until cancelled. The durable consumer is provisioned beforehand
        (`hostaffinity bus provision`): a service's identity may read from it, not make it."""
        settings = self._settings
        sub = await self._js.pull_subscribe_bind(durable=settings.durable, stream=settings.stream)
        try:
            while True:
                raise_if_cancel_requested()
                try:
                    messages = await sub.fetch(settings.batch, settings.fetch_timeout_seconds)
                except TimeoutError:  # nats.errors' and asyncio's alike: nothing new yet
                    continue
                except nats.errors.ConnectionClosedError:
                    raise
                except nats.errors.Error as err:
                    # A server restart or leader change: the durable state is on the server.
                    _log.warning("fetch from %s failed, retrying: %s", settings.durable, err)
                    await asyncio.sleep(self._retry_seconds)
                    continue
                for msg in messages:
                    await self._deliver(msg)
            raise asyncio.CancelledError
        finally:
            with contextlib.suppress(nats.errors.ConnectionClosedError):
                await sub.unsubscribe()

    async def _deliver(self, msg: Msg) -> None:
        with _tracer.start_as_current_span(
            f"{msg.subject} process",
            context=extract_trace_context(msg.headers),
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "nats",
                "messaging.destination.name": msg.subject,
                "messaging.consumer.group.name": self._settings.durable,
            },
        ):
            try:
                await self._process(msg)
            except Exception:
                # Not acked: the server redelivers it after ack_wait.
                _log.exception("message %s on %s left unacked", _position(msg), msg.subject)

    async def _process(self, msg: Msg) -> None:
        try:
            value = self._decode(msg.data)
        except UNDECODABLE as err:
            await self._park(msg, f"does not decode: {str(err)[:200]}")
            return
        try:
            await self._handler(value)
        except Exception as err:
            span = trace.get_current_span()
            span.record_exception(err)
            span.set_status(StatusCode.ERROR, str(err))
            delivered = msg.metadata.num_delivered or 1
            if delivered >= self._settings.max_deliver:
                await self._park(msg, f"handler failed on all {delivered} deliveries: {err!r}")
                return
            delay = self._settings.redelivery_delay(delivered)
            _log.warning(
                "handler failed on %s (delivery %d), retrying in %.1fs: %r",
                _position(msg),
                delivered,
                delay,
                err,
            )
            await msg.nak(delay=delay)
            return
        await msg.ack()

    async def _park(self, msg: Msg, reason: str) -> None:
        _log.error("message %s on %s parked in the DLQ: %s", _position(msg), msg.subject, reason)
        await self._dead_letters.park(msg, reason)
        await msg.ack()


def _position(msg: Msg) -> str:
    meta = msg.metadata
    return f"{meta.stream}#{meta.sequence.stream}"
