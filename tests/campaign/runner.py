"""One campaign from start to verdict: the system up, the workload and the seeded faults for the
given minutes, every fault healed, a quiet period, the final state read, the invariants checked
and the report printed, with how long each kind of fault took to heal (convergence.py). A soak
(`Soak`) runs the steady workload under light faults and samples every process and bus as it
goes (soak.py), failing on a measure that drifts (drift.py). Returns the exit status (0: all
invariants held, and no drift)."""

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

from tests.campaign import convergence, drift
from tests.campaign.checker import END, Result, check, first_breach
from tests.campaign.faults import Injector, PlannedFault, Targets, schedule
from tests.campaign.history import RECONFIGURE, Clock, Fault, FinalState, History
from tests.campaign.install import COOLDOWN_S, SHAPES
from tests.campaign.probe import Prober
from tests.campaign.processes import THIS_RELEASE
from tests.campaign.snapshot import read_final
from tests.campaign.soak import Sampler
from tests.campaign.system import System, running_system
from tests.campaign.upgrade import previous_release, read_events_with_both
from tests.campaign.workload import Workload

STARTUP_S: Final = 120.0
SETTLE_S: Final = 20.0  # after agreement: a DRS resync and descheduler cycles, every fault over
QUIET_MAX_S: Final = 120.0
BREACHES_SHOWN: Final = 5  # per broken invariant, besides the first one's history
VCENTER_OPERATIONS: Final = ("vmotion", "admin-drs-rule")
# A soak's light faults: one of every SOAK_FAULTS_KEPT of the seed's schedule (about one a
# minute), so that processes restart now and then without the run being mostly faults.
SOAK_FAULTS_KEPT: Final = 8


@dataclasses.dataclass(frozen=True)
class Soak:
    """A soak's settings: how often to sample, how long the warm-up is (the drift rule judges
    the samples after it), and whether light faults run (else none)."""

    sample_every_s: float = 300.0
    warmup_s: float = 600.0
    faults: bool = True


async def campaign(
    seed: int, minutes: float, workdir: Path, soak: Soak | None = None, *, upgrade: bool = False
) -> int:
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
        if soak is not None:
            planned = planned[::SOAK_FAULTS_KEPT] if soak.faults else []
        mode = "" if soak is None else ", soak"
        print(
            f"campaign: seed {seed}, {minutes:g} min{mode}, work in {workdir}, the first install "
            f"on {first_release.version}",
            flush=True,
        )
        workload = Workload(system, random.Random(seed + 1), clock, steady=soak is not None)
        workload.start()
        sampler = Sampler(system, clock)
        controllers = asyncio.create_task(workload.run_controllers())
        try:
            await _until(lambda: _all_ready(system), "every replica ready", STARTUP_S, system)
            go = clock.now()
            for each in histories:
                each.ready_at = go
            prober = Prober(system, clock)
            probing = asyncio.create_task(prober.run())
            end = go + minutes * 60
            sampling = asyncio.create_task(_sample(sampler, soak, go, end))
            shifted = [PlannedFault(f.at + go, f.duration, f.kind, f.target) for f in planned]
            injector = Injector(system, clock)
            faults = asyncio.create_task(injector.run(shifted, workload.vcsim_restarted))
            while clock.now() < end:
                await workload.step()
                await asyncio.sleep(workload.rng.uniform(0.5, 2.0))
            await faults
            await sampling

            async def quiet() -> bool:
                return await _all_ready(system) and await prober.labels_and_kv_agree()

            await _until(quiet, "every replica ready and labels agreeing", QUIET_MAX_S, system)
            await asyncio.sleep(SETTLE_S)
            probing.cancel()
            await asyncio.gather(probing, return_exceptions=True)
        finally:
            controllers.cancel()
            await asyncio.gather(controllers, return_exceptions=True)
            await sampler.close()
        await read_final(system)
        if upgrade:
            await read_events_with_both(system.first, first_release)
    for each in history.installs:
        (workdir / f"final-{each.name}.json").write_text(_as_json(each.final), encoding="utf-8")
    results = check(history)
    healed = convergence.healings(history)
    status = report(history, planned, results, healed, prober.durations)
    if soak is not None:
        status = max(status, soak_report(sampler.samples, soak, history.ready_at))
    return status


def report(
    history: History,
    planned: list[PlannedFault],
    results: list[Result],
    healed: list[convergence.Healing],
    probe_durations: list[float],
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
    cost = 1000 * sum(probe_durations) / max(1, len(probe_durations))
    print(
        f"  convergence after each fault, from its end (probed about once a second, "
        f"{cost:.0f} ms a probe on average):"
    )
    for line in convergence.table(healed):
        print(line)
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


def soak_report(samples: list[drift.Sample], soak: Soak, started: float) -> int:
    """The samples as a markdown table, and the drift rule's verdict: 1, naming each process
    and measure that drifted, else 0."""
    warmup_end = started + soak.warmup_s
    rounds = len({s.t for s in samples})
    print(
        f"soak: {rounds} samplings every {soak.sample_every_s:g} s, the warm-up (*) "
        f"{soak.warmup_s:g} s; RSS in MiB, ↺ a process started again:"
    )
    for line in drift.table(samples, warmup_end, started):
        print(line)
    found = drift.drifts(samples, warmup_end)
    for each in found:
        print(f"soak: DRIFT: {each.describe()}")
    if found:
        return 1
    series = len({(s.subject, s.measure) for s in samples})
    print(f"soak: no drift in {series} series over {rounds} samplings")
    return 0


async def _sample(sampler: Sampler, soak: Soak | None, go: float, end: float) -> None:
    """A soak's samplings, at go, go + every, ... up to the workload's end."""
    if soak is None:
        return
    await sampler.open()
    at = go
    while at <= end:
        await asyncio.sleep(max(0.0, at - sampler.clock.now()))
        await sampler.sample()
        at += soak.sample_every_s


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
