"""Publishing to JetStream: a message id so the server drops repeats, and the trace context."""

import logging

from nats.js import JetStreamContext
from nats.js.api import Header, PubAck
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from hostaffinity.runtime.process.telemetry import inject_trace_context

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)


async def publish(js: JetStreamContext, subject: str, payload: bytes, *, msg_id: str) -> PubAck:
    """Publish once per `msg_id` within the stream's duplicate window; `ack.duplicate` says so.

    The publish span is current while the headers are written, so a consumer's span becomes its
    child in the same trace.
    """
    with _tracer.start_as_current_span(
        f"{subject} publish",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.message.id": msg_id,
        },
    ) as span:
        headers = {Header.MSG_ID.value: msg_id}
        inject_trace_context(headers)
        ack = await js.publish(subject, payload, headers=headers)
        duplicate = bool(ack.duplicate)
        span.set_attribute("messaging.nats.duplicate", duplicate)
        if duplicate:
            _log.debug("%s: message %s was already stored as seq %d", subject, msg_id, ack.seq)
        return ack
