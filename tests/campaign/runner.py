"""One campaign from start to verdict: the system up, the workload and the seeded faults for the
given minutes, every fault healed, a quiet period, the final state read, the invariants checked
and the report printed. Returns the exit status (0: all invariants held)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from pyVmomi import vim

from hostaffinity.schema import LABEL_ESXI_HOST
from tests.campaign.checker import END, Result, check, first_breach
from tests.campaign.faults import Injector, PlannedFault, schedule
from tests.campaign.history import RECONFIGURE, Clock, History
from tests.campaign.snapshot import read_final, vcenter_truth
from tests.campaign.system import COOLDOWN_S, System, running_system
from tests.campaign.workload import Workload
from tests.e2e.harness import FAST_LEASE

INITIAL_NODES: Final = 6
STARTUP_S: Final = 120.0
SETTLE_S: Final = 20.0  # after agreement: a DRS resync and descheduler cycles, every fault over
QUIET_MAX_S: Final = 120.0
PROBE_EVERY_S: Final = 1.0
BREACHES_SHOWN: Final = 5  # per broken invariant, besides the first one's history


async def campaign(seed: int, minutes: float, workdir: Path) -> int:
    clock = Clock()
    history = History(
        seed=seed, lease_duration_s=FAST_LEASE.duration_seconds, cooldown_s=COOLDOWN_S
    )
    async with running_system(workdir, history, clock) as system:
        planned = schedule(seed, minutes, sorted(system.replicas))
        print(f"campaign: seed {seed}, {minutes:g} min, work in {workdir}", flush=True)
        workload = Workload(system, random.Random(seed + 1), history, clock)
        await workload.start(INITIAL_NODES)
        controllers = asyncio.create_task(workload.controllers.run())
        try:
            await _until(lambda: _all_ready(system), "every replica ready", STARTUP_S)
            go = history.ready_at = clock.now()
            agreement: list[tuple[float, bool]] = []
            prober = asyncio.create_task(_probe(system, clock, agreement))
            shifted = [PlannedFault(f.at + go, f.duration, f.kind, f.target) for f in planned]
            injector = Injector(system, history, clock)
            faults = asyncio.create_task(injector.run(shifted, workload.vcsim_restarted))
            while clock.now() < go + minutes * 60:
                await workload.step()
                await asyncio.sleep(workload.rng.uniform(0.5, 2.0))
            await faults
            healed = clock.now()
            vcenter = Vcenter(system)

            async def quiet() -> bool:
                return await _all_ready(system) and await _labels_agree(system, vcenter)

            await _until(quiet, "every replica ready and labels agreeing", QUIET_MAX_S)
            await asyncio.sleep(SETTLE_S)
            prober.cancel()
            await asyncio.gather(prober, return_exceptions=True)
        finally:
            controllers.cancel()
            await asyncio.gather(controllers, return_exceptions=True)
        await read_final(system, history)
    results = check(history)
    return report(history, planned, results, _convergence(history, agreement, healed))


def report(
    history: History, planned: list[PlannedFault], results: list[Result], convergence: float
) -> int:
    for result in results:
        verdict = "held" if not result.breaches else f"BROKEN {len(result.breaches)}x"
        print(f"  {result.name}: {result.checked} checked, {verdict}")
        for breach in result.breaches[:BREACHES_SHOWN]:
            when = "final state" if breach.t == END else f"{breach.t:.2f} s"
            print(f"    {when}: {breach.message}")
    kinds = Counter(f.kind for f in history.faults)
    operations = Counter(o.kind for o in history.operations if o.ok)
    evictions = sum(1 for r in history.requests if r.path.endswith("/eviction") and r.status == 201)
    drs_writes = sum(1 for w in history.vcenter_writes if w.method == RECONFIGURE)
    failed_ops = sum(1 for o in history.operations if not o.ok)
    print(f"  faults by kind: {dict(sorted(kinds.items()))}")
    print(f"  operations: {dict(sorted(operations.items()))} (+{failed_ops} failed)")
    print(
        f"  evictions: {evictions}, DRS reconfigures: {drs_writes}, events: {len(history.events)}"
    )
    print(f"  longest convergence after a fault: {convergence:.1f} s")
    found = first_breach(results)
    if found is not None:
        result, breach = found
        print(
            f"campaign: seed {history.seed} broke {result.name}; fault schedule (on the run's "
            f"clock, as the history; the workload started at {history.ready_at:.1f} s):"
        )
        for fault in planned:
            shifted = PlannedFault(
                fault.at + history.ready_at, fault.duration, fault.kind, fault.target
            )
            print(f"  {shifted.describe()}")
        when = "in the final state" if breach.t == END else f"at {breach.t:.2f} s"
        print(f"first breach {when}: {breach.message}")
        last = max((r.t for r in history.requests), default=0.0)
        for line in history.around(last if breach.t == END else breach.t):
            print(f"  {line}")
        print(
            f"campaign: {len(history.faults)} faults, {len(history.operations)} operations, "
            f"{len(history.events)} events checked, {result.name} broken"
        )
        return 1
    print(
        f"campaign: {len(history.faults)} faults, {len(history.operations)} operations, "
        f"{len(history.events)} events checked, all invariants held"
    )
    return 0


def _convergence(history: History, agreement: list[tuple[float, bool]], healed: float) -> float:
    """The longest time from a fault's end to the first probe where every label and KV value
    agreed with vCenter again."""
    longest = 0.0
    for fault in history.faults:
        back = next((t for t, agreed in agreement if agreed and t >= fault.end), healed)
        longest = max(longest, back - fault.end)
    return longest


async def _probe(system: System, clock: Clock, agreement: list[tuple[float, bool]]) -> None:
    vcenter = Vcenter(system)
    while True:
        agreement.append((clock.now(), await _labels_agree(system, vcenter)))
        await asyncio.sleep(PROBE_EVERY_S)


class Vcenter:
    """One admin session of the runner's own, opened again after vcsim went away."""

    def __init__(self, system: System) -> None:
        self._system = system
        self._si: vim.ServiceInstance | None = None

    def truth(self) -> dict[str, tuple[str, str]]:
        try:
            if self._si is None:
                self._si = self._system.admin()
            return vcenter_truth(self._si)
        except Exception:
            self._si = None
            raise


async def _labels_agree(system: System, vcenter: Vcenter) -> bool:
    """Every node's label and KV value name the host vCenter has its VM on."""
    try:
        truth = await asyncio.to_thread(vcenter.truth)
        async with asyncio.timeout(3), system.nats.connection("cli") as cli:
            store = await cli.topology()
            for node in system.double.store.objects("nodes", None):
                name = node["metadata"]["name"]
                placement = await store.get_node(name)
                label = (node["metadata"].get("labels") or {}).get(LABEL_ESXI_HOST)
                if placement is None or (placement.host_moid, label) != truth.get(name):
                    return False
    except Exception:  # vcsim or the bus away: not agreeing
        return False
    return True


async def _all_ready(system: System) -> bool:
    return all(await asyncio.gather(*(r.ready() for r in system.replicas.values())))


async def _until(check: Callable[[], Awaitable[bool]], what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"campaign: no {what} within {within:.0f} s")
        await asyncio.sleep(1.0)
