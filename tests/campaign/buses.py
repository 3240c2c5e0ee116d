"""One client of each install's bus as one identity, opened once and kept for the run (nats-py
reconnects it after a server's loss): the probe reads as `cli`, the soak's sampler as
`provision`, the identity allowed stream info."""

from __future__ import annotations

import contextlib

from hostaffinity.runtime.bus.client import Bus
from tests.campaign.system import System


class InstallBuses:
    def __init__(self, system: System, identity: str) -> None:
        self._system = system
        self._identity = identity
        self._stack = contextlib.AsyncExitStack()
        self.by_install: dict[str, Bus] = {}  # by the install's name ("a", "b")

    async def open(self) -> None:
        for install in self._system.installs:
            connection = install.connection(self._identity)
            self.by_install[install.shape.name] = await self._stack.enter_async_context(connection)

    async def close(self) -> None:
        await self._stack.aclose()
