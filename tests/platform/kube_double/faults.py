"""Test hooks on requests: what an unhealthy or slow apiserver does to one object's requests
(`ObjectFault`), and PATCHes or watch events held until a test releases them (`PatchHold`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from . import errors


@dataclass
class PatchHold:
    """Holds PATCH requests on one object until released (a test proves nobody waited)."""

    released: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0

    def release(self) -> None:
        self.released.set()


@dataclass
class ObjectFault:
    """What an unhealthy apiserver does to every request on one object, whatever the verb:
    hold it until released (etcd stalled), delay it (overloaded), or answer 500 InternalError
    (etcd unreachable). A held or delayed request is still carried out afterwards, as a real
    server finishes a request its client has given up on."""

    delay_s: float = 0.0
    failing: bool = False
    held: bool = False
    requests: int = 0
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def hold(self) -> None:
        self.held = True
        self._released.clear()

    def release(self) -> None:
        self.held = False
        self._released.set()

    def clear(self) -> None:
        """Healthy again: no delay, no failure, nothing held."""
        self.delay_s, self.failing = 0.0, False
        self.release()

    async def apply(self) -> None:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.held:
            await self._released.wait()
        if self.failing:
            # apimachinery/pkg/api/errors/errors.go NewInternalError: message, reason, causes.
            cause = "etcdserver: request timed out"
            raise errors.status(
                500,
                "InternalError",
                f"Internal error occurred: {cause}",
                {"causes": [{"message": cause}]},
            )
