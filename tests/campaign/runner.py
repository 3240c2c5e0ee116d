"""One campaign from start to verdict: the system up, the workload and the seeded faults for the
given minutes, every fault healed, a quiet period, the final state read, the invariants checked
and the report printed. Returns the exit status (0: all invariants held)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from hostaffinity.schema import LABEL_ESXI_HOST
from tests.campaign.checker import END, Result, check, first_breach
from tests.campaign.faults import Injector, PlannedFault, Targets, schedule
from tests.campaign.history import RECONFIGURE, Clock, Fault, FinalState, History
from tests.campaign.install import COOLDOWN_S, SHAPES
from tests.campaign.processes import THIS_RELEASE
from tests.campaign.snapshot import read_final, vcenter_truth
from tests.campaign.system import AdminSession, System, running_system
from tests.campaign.upgrade import previous_release, read_events_with_both
from tests.campaign.workload import Workload

STARTUP_S: Final = 120.0
SETTLE_S: Final = 20.0  # after agreement: a DRS resync and descheduler cycles, every fault over
QUIET_MAX_S: Final = 120.0
PROBE_EVERY_S: Final = 1.0
BREACHES_SHOWN: Final = 5  # per broken invariant, besides the first one's history
VCENTER_OPERATIONS: Final = ("vmotion", "admin-drs-rule")


async def campaign(seed: int, minutes: float, workdir: Path, *, upgrade: bool = False) -> int:
    """With `upgrade`, the first install starts on the previous release and the upgrade fault
    rolls it onto this tree's (tests/campaign/upgrade.py)."""
    clock = Clock()
    first_release = await asyncio.to_thread(previous_release) if upgrade else THIS_RELEASE
    histories = [
        History(
            seed=seed,
            name=shape.name,
            lease_duration_s=shape.lease.duration_seconds,
            cooldown_s=COOLDOWN_S,
        )
        for shape in SHAPES
    ]
    history = histories[0]
    history.others = histories[1:]
    async with running_system(workdir, histories, clock, first_release) as system:
        for install in system.installs:
            install.history.install = install.token
        planned = schedule(seed, minutes, Targets.of(system), upgrade=upgrade)
        print(
            f"campaign: seed {seed}, {minutes:g} min, work in {workdir}, the first install on "
            f"{first_release.version}",
            flush=True,
        )
        workload = Workload(system, random.Random(seed + 1), clock)
        workload.start()
        controllers = asyncio.create_task(workload.run_controllers())
        try:
            await _until(lambda: _all_ready(system), "every replica ready", STARTUP_S, system)
            go = clock.now()
            for each in histories:
                each.ready_at = go
            agreement: list[tuple[float, bool]] = []
            prober = asyncio.create_task(_probe(system, clock, agreement))
            shifted = [PlannedFault(f.at + go, f.duration, f.kind, f.target) for f in planned]
            injector = Injector(system, clock)
            faults = asyncio.create_task(injector.run(shifted, workload.vcsim_restarted))
            while clock.now() < go + minutes * 60:
                await workload.step()
                await asyncio.sleep(workload.rng.uniform(0.5, 2.0))
            await faults
            healed = clock.now()
            vcenter = AdminSession(system.admin)

            async def quiet() -> bool:
                return await _all_ready(system) and await _labels_agree(system, vcenter)

            await _until(quiet, "every replica ready and labels agreeing", QUIET_MAX_S, system)
            await asyncio.sleep(SETTLE_S)
            prober.cancel()
            await asyncio.gather(prober, return_exceptions=True)
        finally:
            controllers.cancel()
            await asyncio.gather(controllers, return_exceptions=True)
        await read_final(system)
        if upgrade:
            await read_events_with_both(system.first, first_release)
    for each in history.installs:
        (workdir / f"final-{each.name}.json").write_text(_as_json(each.final), encoding="utf-8")
    results = check(history)
    return report(history, planned, results, _convergence(history, agreement, healed))


def report(
    history: History, planned: list[PlannedFault], results: list[Result], convergence: float
) -> int:
    for result in results:
        verdict = "held" if not result.breaches else f"BROKEN {len(result.breaches)}x"
        print(f"  {result.name} [{result.install}]: {result.checked} checked, {verdict}")
        for breach in result.breaches[:BREACHES_SHOWN]:
            when = "final state" if breach.t == END else f"{breach.t:.2f} s"
            print(f"    {when}: {breach.message}")
    vcenter = Counter(o.kind for o in history.operations if o.ok and o.kind in VCENTER_OPERATIONS)
    print(f"  vCenter operations: {dict(sorted(vcenter.items()))}")
    for each in history.installs:
        kinds = Counter(f.kind for f in each.faults)
        in_kubernetes = Counter(
            o.kind for o in each.operations if o.ok and o.kind not in VCENTER_OPERATIONS
        )
        evictions = sum(
            1 for r in each.requests if r.path.endswith("/eviction") and r.status == 201
        )
        drs_writes = sum(1 for w in each.vcenter_writes if w.method == RECONFIGURE)
        unresolved = sum(w.unresolved for w in each.vcenter_writes)
        failed_ops = sum(1 for o in each.operations if not o.ok)
        print(f"  install {each.name} ({each.install}):")
        print(f"    faults by kind: {dict(sorted(kinds.items()))}")
        print(f"    operations: {dict(sorted(in_kubernetes.items()))} (+{failed_ops} failed)")
        print(
            f"    evictions: {evictions}, DRS reconfigures: {drs_writes} ({unresolved} rule "
            f"keys vCenter could not be asked about), events: {len(each.events)}"
        )
    print(f"  longest convergence after a fault: {convergence:.1f} s")
    faults = len(_all_faults(history))
    operations = sum(len(each.operations) for each in history.installs)
    events = sum(len(each.events) for each in history.installs)
    found = first_breach(results)
    if found is not None:
        result, breach = found
        print(
            f"campaign: seed {history.seed} broke {result.name} [{result.install}]; fault "
            f"schedule (on the run's clock, as the history; the workload started at "
            f"{history.ready_at:.1f} s):"
        )
        for fault in planned:
            shifted = PlannedFault(
                fault.at + history.ready_at, fault.duration, fault.kind, fault.target
            )
            print(f"  {shifted.describe()}")
        when = "in the final state" if breach.t == END else f"at {breach.t:.2f} s"
        print(f"first breach {when}: {breach.message}")
        broken = next(h for h in history.installs if h.name == result.install)
        last = max((r.t for r in broken.requests), default=0.0)
        for line in broken.around(last if breach.t == END else breach.t):
            print(f"  {line}")
        print(
            f"campaign: {faults} faults, {operations} operations, {events} events checked, "
            f"{result.name} [{result.install}] broken"
        )
        return 1
    print(
        f"campaign: {faults} faults, {operations} operations, {events} events checked, "
        "all invariants held"
    )
    return 0


def _as_json(final: FinalState) -> str:
    """The final state as JSON, for a look after the run (sets sorted, keys as text)."""
    data = dataclasses.asdict(final)
    data["admin_rules"] = {"/".join(key): rule for key, rule in final.admin_rules.items()}
    return json.dumps(data, indent=1, default=sorted)


def _all_faults(history: History) -> set[Fault]:
    """Every install's faults, a vcsim restart (in each install's history) once."""
    return {fault for each in history.installs for fault in each.faults}


def _convergence(history: History, agreement: list[tuple[float, bool]], healed: float) -> float:
    """The longest time from a fault's end to the first probe where every label and KV value
    of every install agreed with vCenter again."""
    longest = 0.0
    for fault in _all_faults(history):
        back = next((t for t, agreed in agreement if agreed and t >= fault.end), healed)
        longest = max(longest, back - fault.end)
    return longest


async def _probe(system: System, clock: Clock, agreement: list[tuple[float, bool]]) -> None:
    vcenter = AdminSession(system.admin)
    while True:
        agreement.append((clock.now(), await _labels_agree(system, vcenter)))
        await asyncio.sleep(PROBE_EVERY_S)


async def _labels_agree(system: System, vcenter: AdminSession) -> bool:
    """Every install's nodes' labels and KV values name the host vCenter has its VM on."""
    try:
        truth = await asyncio.to_thread(vcenter.call, vcenter_truth)
        for install in system.installs:
            async with asyncio.timeout(3), install.connection("cli") as cli:
                store = await cli.topology()
                for node in install.double.store.objects("nodes", None):
                    name = node["metadata"]["name"]
                    placement = await store.get_node(name)
                    label = (node["metadata"].get("labels") or {}).get(LABEL_ESXI_HOST)
                    if placement is None or (placement.host_moid, label) != truth.get(name):
                        return False
    except Exception:  # vcsim or a bus away: not agreeing
        return False
    return True


async def _all_ready(system: System) -> bool:
    return not await _not_ready(system)


async def _not_ready(system: System) -> list[str]:
    replicas = list(system.replicas.values())
    ready = await asyncio.gather(*(r.ready() for r in replicas))
    return [r.name for r, ok in zip(replicas, ready, strict=True) if not ok]


async def _until(
    check: Callable[[], Awaitable[bool]], what: str, within: float, system: System
) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            waiting = ", ".join(await _not_ready(system)) or "none"
            raise TimeoutError(f"campaign: no {what} within {within:.0f} s (not ready: {waiting})")
        await asyncio.sleep(1.0)
