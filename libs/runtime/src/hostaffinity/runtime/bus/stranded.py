"""Requests sent on a connection that then broke are answered at the reconnect, not at their
timeout.

nats-py waits for a request's answer until the request's timeout (5 s for our JetStream
calls), even when the connection the request left on is gone and the answer with it: a server
answers on the connection the request came in on. So a KV put sent just before a partition
healed waited out its 5 s before the labeller tried again (the campaign's slowest recovery,
docs/reliability.md). At each disconnect the requests still waiting are noted; at the reconnect
those still waiting fail with nats-py's `TimeoutError`, what their timeout would have raised,
only sooner. Every caller already reads that answer as "unknown, try again": a retried publish
is deduplicated by its message id, a retried KV write by its expected revision or its value.
A request made while reconnecting is buffered and sent on the new connection: it is not noted.
"""

import asyncio
from typing import Any

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError


class StrandedRequests:
    """Call `note()` from the disconnect callback and `fail()` from the reconnect one."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._waiting: list[asyncio.Future[Any]] = []

    def note(self) -> None:
        """The requests waiting for an answer now, sent on the connection just lost."""
        # nats-py's map of request tokens to the futures their answers resolve (new-style
        # requests, the default, which JetStream's publish and API calls use).
        self._waiting = [future for future in self._nc._resp_map.values() if not future.done()]

    def fail(self) -> int:
        """Fail those still waiting; returns how many."""
        waiting, self._waiting = self._waiting, []
        failed = 0
        for future in waiting:
            if not future.done():
                future.set_exception(NatsTimeoutError())
                failed += 1
        return failed
