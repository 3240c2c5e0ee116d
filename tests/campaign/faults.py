"""The fault schedule (a pure function of the seed, the length and what there is to hit, so a
seed replays it) and the injector that carries each fault out and heals it.

Faults hit both installs: their replicas, their buses and their API doubles. They overlap
freely, except that one resource suffers one fault at a time: one server of a bus down at a
time (three servers keep a quorum with one lost; the lean install's one server is its bus), one
fault per API double, one vcsim restart.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tests.campaign.history import Clock, Fault
from tests.campaign.processes import Replica
from tests.campaign.system import System
from tests.campaign.upgrade import UPGRADE, rolling_upgrade

REPLICA_KINDS: Final = ("kill-replica", "partition-nats", "partition-api", "refuse-api")
API_KINDS: Final = ("api-held", "api-slow", "api-500", "api-429")
KINDS: Final = (*REPLICA_KINDS, *API_KINDS, "kill-nats", "restart-vcsim", "pause-leader")
FAULTS_PER_MINUTE: Final = 8
MIN_S, MAX_S = 2.0, 8.0


@dataclass(frozen=True)
class Targets:
    """What faults can hit, named as the injector finds them (system.py)."""

    replicas: tuple[str, ...]
    buses: tuple[tuple[str, ...], ...]  # each bus's servers
    services: tuple[str, ...]  # leader-elected services: pause-leader pauses the leader
    apis: tuple[str, ...]  # API doubles

    @classmethod
    def of(cls, system: System) -> Targets:
        return cls(
            tuple(sorted(system.replicas)),
            tuple(tuple(sorted(i.nats_servers)) for i in system.installs),
            tuple(system.leader_elected),
            tuple(system.apis),
        )


@dataclass(frozen=True)
class PlannedFault:
    at: float
    duration: float
    kind: str
    target: str  # a replica, a NATS server, a service (its leader at the time), an API or ""

    def describe(self) -> str:
        return f"{self.at:6.1f}s +{self.duration:.1f}s {self.kind} {self.target}".rstrip()


def schedule(
    seed: int, minutes: float, targets: Targets, *, upgrade: bool = False
) -> list[PlannedFault]:
    """Faults over the first 80% of the run, at most one at a time per resource; with `upgrade`,
    the first install's rolling upgrade too, in the first 30% (its own draw: the other faults of
    a seed stay as they were)."""
    rng = random.Random(seed)
    span = minutes * 60 * 0.8
    planned: list[PlannedFault] = []
    if upgrade:
        at = round(random.Random(f"{UPGRADE} {seed}").uniform(3.0, max(3.0, span * 0.3)), 1)
        planned.append(PlannedFault(at, 0.0, UPGRADE, ""))
    busy: dict[str, float] = {}
    servers = [(server, f"bus {i}") for i, bus in enumerate(targets.buses) for server in bus]
    for _ in range(max(3, round(minutes * FAULTS_PER_MINUTE))):
        at = round(rng.uniform(3.0, span), 1)
        duration = round(rng.uniform(MIN_S, MAX_S), 1)
        kind = rng.choice(KINDS)
        if kind in REPLICA_KINDS:
            target = resource = rng.choice(targets.replicas)
        elif kind == "kill-nats":
            target, resource = rng.choice(servers)
        elif kind == "pause-leader":
            target = resource = rng.choice(targets.services)
        elif kind in API_KINDS:
            target = resource = rng.choice(targets.apis)
        else:
            target, resource = "", "vcsim"
        if busy.get(resource, -1.0) >= at:
            continue
        busy[resource] = at + duration
        planned.append(PlannedFault(at, duration, kind, target))
    return sorted(planned, key=lambda f: f.at)


class Injector:
    """Carries out planned faults against a running system; each is recorded in the history of
    the install it hit (a vcsim restart in every install's)."""

    def __init__(self, system: System, clock: Clock) -> None:
        self.system = system
        self.clock = clock

    async def run(self, planned: list[PlannedFault], vcsim_restarted: Callable[[], None]) -> None:
        """Each fault at its time, overlapping as scheduled; returns when all are healed."""
        async with asyncio.TaskGroup() as group:
            for fault in planned:
                await asyncio.sleep(max(0.0, fault.at - self.clock.now()))
                group.create_task(self._one(fault, vcsim_restarted))

    async def _one(self, fault: PlannedFault, vcsim_restarted: Callable[[], None]) -> None:
        if fault.kind == UPGRADE:
            await rolling_upgrade(self.system.first, self.clock)
            return
        start = self.clock.now()
        target = fault.target
        system = self.system
        hit = [system.install_of(target).history]
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
            server = system.nats_servers[target]
            await server.kill()
            await asyncio.sleep(fault.duration)
            await server.start()
        elif fault.kind == "restart-vcsim":
            await asyncio.to_thread(system.kill_vcsim)
            await asyncio.sleep(fault.duration)
            await asyncio.to_thread(system.start_vcsim)
            hit = [install.history for install in system.installs]
            for history in hit:
                history.vcsim_restarts.append(self.clock.now())
            vcsim_restarted()
        elif fault.kind == "pause-leader":
            leader = self.leader(target)
            if leader is None:
                return
            target = leader.name
            leader.pause()
            await asyncio.sleep(fault.duration)
            leader.resume()
        for history in hit:
            history.faults.append(Fault(start, self.clock.now(), fault.kind, target))

    async def _api(self, fault: PlannedFault) -> None:
        double = self.system.install_of(fault.target).double
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

    def leader(self, target: str) -> Replica | None:
        """The replica whose process holds the Lease of the targeted install's service now
        (from that install's double)."""
        install = self.system.install_of(target)
        service = target.removeprefix(install.shape.prefix)
        lease = install.double.read(
            "coordination.k8s.io/v1", "leases", f"hostaffinity-{service}", "kube-system"
        )
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return next((r for r in install.replicas.values() if r.identity == holder), None)
