"""Reading the events stream from a point in time (or its start, or now) to its end, and on.

One ordered consumer filtered to the subjects wanted and started where asked: the server skips
the rest, so a reader pays for what it reads. Ephemeral, as every reader's consumer must be
(k8s/base/nats/auth.conf): it goes away with the reader.
"""

from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from hostaffinity.schema import EVENTS_STREAM


async def replay(
    js: JetStreamContext,
    subjects: Sequence[str],
    *,
    since: datetime | None = None,
    from_start: bool = False,
    follow: bool = False,
) -> AsyncIterator[Msg]:
    """The events stream's messages on `subjects`, in stream order: from `since` (else from the
    stream's start with `from_start`, else from now) to the stream's end, and on with
    `follow`."""
    if since is not None:
        policy, start = DeliverPolicy.BY_START_TIME, since
    else:
        policy, start = (DeliverPolicy.ALL if from_start else DeliverPolicy.NEW), None
    config = ConsumerConfig(
        deliver_policy=policy,
        opt_start_time=start,
        filter_subjects=list(subjects) if len(subjects) > 1 else None,
    )
    subscription = await js.subscribe(
        subjects[0], stream=EVENTS_STREAM, ordered_consumer=True, config=config
    )
    try:
        # Nothing to read when the consumer neither holds nor already pushed a message.
        info = await subscription.consumer_info()
        pushed = info.delivered.consumer_seq if info.delivered is not None else 0
        if not follow and not info.num_pending and not pushed:
            return
        async for message in subscription.messages:
            yield message
            if not follow and not message.metadata.num_pending:
                return
    finally:
        await subscription.unsubscribe()
