"""The soak's sampler: at each sampling, for every process of the system (each replica, each
nats-server, vcsim) its resident memory and open file descriptors, read from
/proc/<pid>/status and /proc/<pid>/fd; and for each install's bus, per stream its JetStream
consumers, and per KV bucket the most revisions any key holds and its entries (its stream's
messages, delete markers included). drift.py judges the samples.

The campaign process (the API doubles, the proxies, the recorded history, which grows by
design) is not sampled. A process that is down at a sampling (killed by a fault) has no sample
then; one started again begins a new series (its pid).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from hostaffinity.cli.bus_access import OUR_STREAMS
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.layout import KV_STREAM_PREFIX
from tests.campaign.buses import InstallBuses
from tests.campaign.drift import Sample
from tests.campaign.history import Clock
from tests.campaign.system import System

PROC: Final = Path("/proc")


def process_measures(pid: int) -> dict[str, float]:
    """RSS (MiB) and open descriptors of a live process; empty if it is gone."""
    try:
        status = (PROC / str(pid) / "status").read_text(encoding="utf-8")
        fds = len(os.listdir(PROC / str(pid) / "fd"))
    except (FileNotFoundError, ProcessLookupError):
        return {}
    rss = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"rss MiB": round(int(rss) / 1024, 1), "fds": float(fds)}


async def bus_measures(bus: Bus) -> dict[str, float]:
    """Consumers and stored KiB per stream, and per KV bucket its keys, most revisions of one key
    and entries;
    a stream this install has not provisioned (the fleet's, without a fleet) is left out."""
    measures: dict[str, float] = {}
    for stream in OUR_STREAMS:
        kv = stream.startswith(KV_STREAM_PREFIX)
        try:
            info = await bus.js.stream_info(stream, subjects_filter=">" if kv else None)
        except Exception as error:  # not provisioned here
            if "not found" in str(error).lower():
                continue
            raise
        measures[f"consumers {stream}"] = float(info.state.consumer_count)
        measures[f"stream-KiB {stream}"] = round(info.state.bytes / 1024, 1)
        if kv:
            bucket = stream.removeprefix(KV_STREAM_PREFIX)
            per_key = (info.state.subjects or {}).values()
            measures[f"kv-keys {bucket}"] = float(len(per_key))
            measures[f"kv-revisions/key {bucket}"] = float(max(per_key, default=0))
            measures[f"kv-entries {bucket}"] = float(info.state.messages)
    return measures


@dataclass
class Sampler:
    """Samples a running system; `samples` holds every sampling's figures."""

    system: System
    clock: Clock
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._buses = InstallBuses(self.system, "provision")

    async def open(self) -> None:
        await self._buses.open()

    async def close(self) -> None:
        await self._buses.close()

    async def sample(self) -> None:
        t = self.clock.now()
        for name, pid in sorted(self.pids().items()):
            for measure, value in process_measures(pid).items():
                self.samples.append(Sample(t, name, pid, measure, value))
        for install, bus in sorted(self._buses.by_install.items()):
            try:
                measures = await bus_measures(bus)
            except Exception:  # the bus away at this sampling: none from it this time
                continue
            for measure, value in measures.items():
                self.samples.append(Sample(t, f"bus {install}", 0, measure, value))

    def pids(self) -> dict[str, int]:
        """Every running process of the system by its name."""
        system = self.system
        pids = {
            name: replica.process.pid
            for name, replica in system.replicas.items()
            if replica.running and replica.process is not None
        }
        for name, server in system.nats_servers.items():
            if server.pid is not None:
                pids[name] = server.pid
        if system.vcsim is not None and system.vcsim.process.poll() is None:
            pids["vcsim"] = system.vcsim.process.pid
        return pids
