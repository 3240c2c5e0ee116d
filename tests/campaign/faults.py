"""The fault schedule (a pure function of the seed and the length, so a seed replays it) and the
injector that carries each fault out and heals it.

Faults overlap freely, except that one resource suffers one fault at a time: one NATS server down
at a time (three servers keep a quorum with one lost), one API fault, one vcsim restart.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tests.campaign.history import Clock, Fault, History
from tests.campaign.processes import Replica
from tests.campaign.system import LEADER_ELECTED, System

REPLICA_KINDS: Final = ("kill-replica", "partition-nats", "partition-api", "refuse-api")
API_KINDS: Final = ("api-held", "api-slow", "api-500", "api-429")
KINDS: Final = (*REPLICA_KINDS, *API_KINDS, "kill-nats", "restart-vcsim", "pause-leader")
FAULTS_PER_MINUTE: Final = 8
MIN_S, MAX_S = 2.0, 8.0


@dataclass(frozen=True)
class PlannedFault:
    at: float
    duration: float
    kind: str
    target: str  # a replica, a NATS server index, a service (its leader at the time), or ""

    def describe(self) -> str:
        return f"{self.at:6.1f}s +{self.duration:.1f}s {self.kind} {self.target}".rstrip()


def schedule(seed: int, minutes: float, replicas: list[str]) -> list[PlannedFault]:
    """Faults over the first 80% of the run, at most one at a time per resource."""
    rng = random.Random(seed)
    span = minutes * 60 * 0.8
    busy: dict[str, float] = {}
    planned: list[PlannedFault] = []
    for _ in range(max(3, round(minutes * FAULTS_PER_MINUTE))):
        at = round(rng.uniform(3.0, span), 1)
        duration = round(rng.uniform(MIN_S, MAX_S), 1)
        kind = rng.choice(KINDS)
        if kind in REPLICA_KINDS:
            target = rng.choice(replicas)
            resource = target
        elif kind == "kill-nats":
            target, resource = str(rng.randrange(3)), "nats"
        elif kind == "pause-leader":
            target = rng.choice(LEADER_ELECTED)
            resource = target
        else:
            target, resource = "", "api" if kind in API_KINDS else "vcsim"
        if busy.get(resource, -1.0) >= at:
            continue
        busy[resource] = at + duration
        planned.append(PlannedFault(at, duration, kind, target))
    return sorted(planned, key=lambda f: f.at)


class Injector:
    """Carries out planned faults against a running system."""

    def __init__(self, system: System, history: History, clock: Clock) -> None:
        self.system = system
        self.history = history
        self.clock = clock

    async def run(self, planned: list[PlannedFault], vcsim_restarted: Callable[[], None]) -> None:
        """Each fault at its time, overlapping as scheduled; returns when all are healed."""
        async with asyncio.TaskGroup() as group:
            for fault in planned:
                await asyncio.sleep(max(0.0, fault.at - self.clock.now()))
                group.create_task(self._one(fault, vcsim_restarted))

    async def _one(self, fault: PlannedFault, vcsim_restarted: Callable[[], None]) -> None:
        start = self.clock.now()
        target = fault.target
        system = self.system
        if fault.kind == "kill-replica":
            replica = system.replicas[target]
            await replica.kill()
            await asyncio.sleep(fault.duration)
            await replica.revive()
        elif fault.kind in ("partition-nats", "partition-api"):
            replica = system.replicas[target]
            proxies = (
                replica.nats_proxies if fault.kind == "partition-nats" else [replica.api_proxy]
            )
            for proxy in proxies:
                proxy.partition()
            await asyncio.sleep(fault.duration)
            for proxy in proxies:
                proxy.reset()
        elif fault.kind == "refuse-api":
            proxy = system.replicas[target].api_proxy
            await proxy.refuse()
            await asyncio.sleep(fault.duration)
            await proxy.accept()
        elif fault.kind in API_KINDS:
            await self._api(fault)
        elif fault.kind == "kill-nats":
            server = system.nats.servers[int(target)]
            await server.kill()
            await asyncio.sleep(fault.duration)
            await server.start()
        elif fault.kind == "restart-vcsim":
            await asyncio.to_thread(system.kill_vcsim)
            await asyncio.sleep(fault.duration)
            await asyncio.to_thread(system.start_vcsim)
            self.history.vcsim_restarts.append(self.clock.now())
            vcsim_restarted()
        elif fault.kind == "pause-leader":
            leader = self.leader(target)
            if leader is None:
                return
            target = leader.name
            leader.pause()
            await asyncio.sleep(fault.duration)
            leader.resume()
        self.history.faults.append(Fault(start, self.clock.now(), fault.kind, target))

    async def _api(self, fault: PlannedFault) -> None:
        double = self.system.double
        api = double.api_fault
        if fault.kind == "api-held":
            api.hold()
        elif fault.kind == "api-slow":
            api.delay_s = 0.5
        elif fault.kind == "api-500":
            api.failing = True
        else:
            double.throttled = True
        await asyncio.sleep(fault.duration)
        double.throttled = False
        api.clear()

    def leader(self, service: str) -> Replica | None:
        """The replica whose process holds the service's Lease now (from the double)."""
        lease = self.system.double.read(
            "coordination.k8s.io/v1", "leases", f"hostaffinity-{service}", "kube-system"
        )
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return next((r for r in self.system.replicas.values() if r.identity == holder), None)
