"""One service replica as its console script runs it: env config, its own proxies to NATS, the
API (and vCenter for the drs-translator), and the faults a process can suffer (kill -9, SIGSTOP).

A replica that exits is started again after `restart_after_s`, as its Deployment would restart
it; the history says whether the campaign ended it, it stepped down (lost its Lease), or crashed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import aiohttp
import msgspec

from hostaffinity.runtime.process.config import Settings
from tests.campaign.history import Clock, History, Instance, ProcessExit
from tests.campaign.recording import AttributedProxy
from tests.platform.console import SCRIPTS

# How the runner says a replica ended because it lost its Lease: stepping down, or, when the
# work did not unwind within duration - renew_deadline, the fence ending the process at once.
LOST_LEASE = ("lost the Lease", "after the Lease was lost; ending the process")


@dataclass(frozen=True)
class Release:
    """Which release a replica runs: its version and the bin/ holding its console scripts."""

    version: str
    bin: Path


THIS_RELEASE: Final = Release("this tree", SCRIPTS)


# A Pod's default terminationGracePeriodSeconds: a replica stopped gracefully gets this long.
GRACE_S: Final = 30.0


def settings_env(section: str, settings: Settings) -> dict[str, str]:
    """`HOSTAFFINITY_<SECTION>__<FIELD>` for every field set away from its default: text as is,
    the rest as JSON (what the runner's loader reads back). A default left out keeps the
    environment one an older release reads too (it rejects a field it does not know)."""
    env = {}
    defaults = {f.name: f.default for f in msgspec.structs.fields(settings)}
    for name, value in msgspec.structs.asdict(settings).items():
        if value is None or value == defaults[name]:
            continue
        key = f"HOSTAFFINITY_{section.upper()}__{name.upper()}"
        env[key] = value if isinstance(value, str) else json.dumps(msgspec.to_builtins(value))
    return env


@dataclass
class Replica:
    """A service process that the campaign can kill, pause, partition and restart."""

    name: str
    service: str
    env: dict[str, str]
    health_port: int
    log_dir: Path
    clock: Clock
    history: History
    api_proxy: AttributedProxy
    nats_proxies: list[AttributedProxy]
    other_proxies: list[AttributedProxy] = field(default_factory=list)
    restart_after_s: float = 1.0
    release: Release = field(default_factory=lambda: THIS_RELEASE)
    identity: str = ""
    process: asyncio.subprocess.Process | None = None
    paused: bool = False
    down: bool = False  # killed by the campaign and not to be restarted yet
    _killing: bool = False
    _starts: int = 0
    _watcher: asyncio.Task[None] | None = None
    _closing: bool = False

    @property
    def proxies(self) -> list[AttributedProxy]:
        return [self.api_proxy, *self.nats_proxies, *self.other_proxies]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        self._starts += 1
        log = self.log_dir / f"{self.name}-{self._starts}.log"
        with log.open("wb") as out:
            self.process = await asyncio.create_subprocess_exec(
                str(self.release.bin / f"hostaffinity-{self.service}"),
                env=os.environ | self.env,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
            )
        # The runner's default Lease identity, which the proxies attribute requests to.
        self.identity = f"{socket.gethostname()}-{self.process.pid}"
        self.history.instances[self.identity] = Instance(
            self.identity,
            self.name,
            self.service,
            self.clock.now(),
            previous_release=self.release is not THIS_RELEASE,
        )
        self._watcher = asyncio.create_task(self._watch(self.process, self.identity, log))

    async def kill(self) -> None:
        """kill -9; it stays down until `revive`."""
        self.down = True
        if self.running:
            assert self.process is not None
            self._killing = True
            if self.paused:
                self.resume()
            self.process.kill()
            await self.process.wait()

    async def replace(self, release: Release) -> None:
        """A rolling update's step: stop gracefully (SIGTERM, as the kubelet does, SIGKILL
        after the grace period) and start again on `release`."""
        self.down = True
        if self.running:
            assert self.process is not None
            self._killing = True
            self.resume()
            self.process.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), GRACE_S)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.release = release
        await self.revive()

    async def revive(self) -> None:
        self.down = False
        if not self.running:
            await self.start()

    def pause(self) -> None:
        if self.running and not self.paused:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused and self.process is not None:
            if self.process.returncode is None:
                self.process.send_signal(signal.SIGCONT)
            self.paused = False

    async def ready(self) -> bool:
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http,
                http.get(f"http://127.0.0.1:{self.health_port}/readyz") as response,
            ):
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def close(self) -> None:
        """Stop for good (SIGTERM, then SIGKILL), and close its proxies."""
        self._closing = True
        self.resume()
        if self.running:
            assert self.process is not None
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._watcher is not None:
            await self._watcher
        for proxy in self.proxies:
            await proxy.stop()

    async def _watch(self, process: asyncio.subprocess.Process, identity: str, log: Path) -> None:
        code = await process.wait()
        if self._closing:
            return
        text = log.read_text(errors="replace")
        tail = text[-3000:]
        self.history.exits.append(
            ProcessExit(
                self.clock.now(),
                self.name,
                identity,
                code,
                by_campaign=self._killing,
                lost_lease=code == 1 and any(phrase in text for phrase in LOST_LEASE),
                log_tail=tail,
            )
        )
        self._killing = False
        self.paused = False
        await asyncio.sleep(self.restart_after_s)
        if not self.down and not self._closing and not self.running:
            await self.start()
