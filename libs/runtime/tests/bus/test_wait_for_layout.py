"""`Bus.wait_for_layout` asks again when the bus does not answer (found by the fault campaign,
seed 10: a replica partitioned from NATS as it started its work exited 1 with `nats: timeout`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import NatsSettings


class SilentThenAnswering:
    """A JetStream context whose first `silent` stream_info calls time out."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.asked = 0

    async def stream_info(self, name: str) -> Any:
        self.asked += 1
        if self.asked <= self.silent:
            raise nats.errors.TimeoutError
        return SimpleNamespace(config=StreamConfig(allow_rollup_hdrs=False))


async def test_no_answer_is_asked_again_not_a_failure() -> None:
    js = SilentThenAnswering(silent=2)
    bus = Bus(cast(Client, None), cast(JetStreamContext, js), NatsSettings())
    await bus.wait_for_layout(["KV_hostaffinity-topology"], retry_seconds=0.01)
    assert js.asked == 3
