"""node-labeller at scale: vcsim with 50 hosts and 2,000 node VMs, 2,000 Nodes, real NATS.

Prints the time to the first complete labelling, then for a series of RelocateVM_Task calls the
latency from the task's `info.completeTime` to the label patch being answered by the API, split
into (vCenter update seen by the labeller, patch sent, patch answered), vcsim's own floor for the
same moves, and the peak RSS of this process (the labeller runs in it; the Kubernetes double,
vcsim and nats-server run apart). `--unplaced N` adds N Nodes no VM matches (bare metal, another
provider's), which the labeller reports as unmatched and must not replan on every update.

    uv run --frozen python bench/node_labeller_bench.py [--hosts 50] [--vms 2000] [--moves 100]
        [--unplaced 0]
"""

import import_roots  # noqa: F401  (pytest's import roots on sys.path, before any test helper)

# isort: split

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from figures import peak_rss_mib, percentile
from vcsim_reads import labeller_floor, read_placement, relocate, simulator_floor

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.main import service_spec
from hostaffinity.node_labeller.service import NodeLabellerWork
from hostaffinity.runtime.process.config import (
    HealthSettings,
    KubernetesSettings,
    LeaseSettings,
    NatsSettings,
)
from hostaffinity.runtime.runner import running_service
from tests.platform.nats import NatsServer
from tests.platform.vcsim import Vcsim, build_vcsim, start_vcsim

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def kube_double(nodes: int, workdir: Path) -> Iterator[Path]:
    """The double in its own process; yields a kubeconfig for it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.platform.kube_double.serve", "--nodes", str(nodes)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url, token = (part.split("=", 1)[1] for part in line.split())
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: d\n"
            f"clusters: [{{name: d, cluster: {{server: '{url}'}}}}]\n"
            f"users: [{{name: d, user: {{token: '{token}'}}}}]\n"
            "contexts: [{name: d, context: {cluster: d, user: d}}]\n",
            encoding="utf-8",
        )
        yield kubeconfig
    finally:
        process.terminate()
        process.wait(30)


@contextlib.asynccontextmanager
async def running_labeller(
    vc: Vcsim, nats: NatsSettings, kubeconfig: Path
) -> AsyncIterator[NodeLabellerWork]:
    """The labeller in this process, run as its service runs it, on this vCenter, bus and
    Kubernetes."""
    config = NodeLabellerConfig(
        vcenters=[vc.settings()],
        nats=nats,
        health=HealthSettings(host="127.0.0.1", port=0),
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        lease=LeaseSettings(namespace="kube-system"),
    )
    work = NodeLabellerWork()
    async with running_service(service_spec(work), config, identity="bench"):
        yield work


async def run(hosts: int, vms: int, moves: int, unplaced: int, workdir: Path) -> None:
    print(
        f"scale: 1 cluster, {hosts} ESXi hosts, {vms} node VMs and Nodes, {unplaced} Nodes "
        f"without a VM, {moves} vMotions"
    )
    started = time.monotonic()
    vc: Vcsim = start_vcsim(
        build_vcsim(),
        workdir,
        ["-listen=127.0.0.1:0", "-login=user:pass", f"-hosts={hosts}", f"-vms={vms}"],
        300,
    )
    print(f"vcsim ready in {time.monotonic() - started:.1f} s")
    nats = NatsServer(workdir)
    await nats.start()
    try:
        async with nats.connection("provision") as provisioning:  # services only check it
            await provisioning.provision()
        with kube_double(vms + unplaced, workdir) as kubeconfig:
            rss_before = peak_rss_mib()
            async with running_labeller(vc, nats.settings(), kubeconfig) as work:
                started = time.monotonic()
                while not work.ready():  # noqa: ASYNC110 (polls a state)
                    await asyncio.sleep(0.01)
                print(
                    f"first complete labelling: {time.monotonic() - started:.2f} s "
                    f"({vms} nodes labelled)"
                )
                await measure_resync(work, vms)
                if moves:
                    await measure_moves(work, vc, hosts, moves)
                print(
                    f"peak RSS of the labeller process: {peak_rss_mib():.0f} MiB "
                    f"(before the labeller started: {rss_before:.0f} MiB)"
                )
            if moves:  # the labeller stopped: vcsim works for the floor's loops alone
                await asyncio.to_thread(
                    measure_simulator_floor, vc, hosts, vms, max(10, moves // 5)
                )
    finally:
        await nats.stop()
        vc.stop()


@dataclass
class MoveTimings:
    """Per RelocateVM_Task, in seconds: from its completeTime to the label patch answered, and
    the parts: vCenter update seen by the labeller, patch sent (KV put done), patch answered."""

    total: list[float] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)


async def time_moves(work: NodeLabellerWork, vc: Vcsim, hosts: int, moves: int) -> MoveTimings:
    """Move VMs one at a time, each to another host, and time each until its label patch is
    answered."""
    labeller = work.labeller
    assert labeller is not None
    si = vc.connect()
    inventory = await asyncio.to_thread(read_placement, si)
    host_moid = {name: moid for moid, name in inventory.host_name.items()}
    wall_minus_mono = time.time() - time.monotonic()
    timings = MoveTimings()
    total, seen, sent, answered = timings.total, timings.seen, timings.sent, timings.answered
    for index in range(moves):
        vm = f"node-{index * 37 % len(labeller.state.placements) + 1}"
        current = labeller.state.placements[vm].host_name
        target = f"DC0_C0_H{(int(current.rsplit('H', 1)[1]) + 1 + index) % hosts}"
        if target == current:
            continue
        before = labeller.timings.get(vm)
        completed_wall = await asyncio.to_thread(relocate, si, inventory.vm[vm], host_moid[target])
        completed = completed_wall - wall_minus_mono  # on the monotonic clock
        while (timing := labeller.timings.get(vm)) is before or timing is None:  # noqa: ASYNC110
            await asyncio.sleep(0.0005)
        while not timing.patch_answered:  # noqa: ASYNC110 (the patch of this very update)
            await asyncio.sleep(0.0005)
        seen.append(timing.seen - completed)
        sent.append(timing.patch_sent - timing.seen)
        answered.append(timing.patch_answered - timing.patch_sent)
        total.append(timing.patch_answered - completed)
    return timings


async def measure_moves(work: NodeLabellerWork, vc: Vcsim, hosts: int, moves: int) -> None:
    timings = await time_moves(work, vc, hosts, moves)
    print(f"vMotion → label patch answered, {len(timings.total)} RelocateVM_Task calls (ms):")
    for name, values in (
        ("total (completeTime → patch answered)", timings.total),
        ("  completeTime → update seen", timings.seen),
        ("  update seen → patch sent", timings.sent),
        ("  patch sent → patch answered", timings.answered),
    ):
        ms = [v * 1000 for v in values]
        print(
            f"  {name:<40} median {statistics.median(ms):7.1f}  p99 {percentile(ms, 0.99):7.1f}"
            f"  max {max(ms):7.1f}"
        )


async def measure_resync(work: NodeLabellerWork, vms: int, rounds: int = 5) -> None:
    """What one periodic resync costs at this scale when nothing differs: vCenter's inventory
    read whole (on the reader's session, beside the feeds), the KV read and compared, every
    node planned again, nothing written."""
    labeller, (watcher,) = work.labeller, work.watchers
    assert labeller is not None
    first = time.monotonic()
    durations = []
    for _ in range(rounds):
        started = time.monotonic()
        reads = labeller.inventory_reads
        watcher.request_full_read()
        await labeller.resync()
        while labeller.inventory_reads == reads or not labeller.idle():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        durations.append((time.monotonic() - started) * 1000)
    patched = sum(1 for t in labeller.timings.values() if t.seen >= first and t.patch_sent)
    print(
        f"resync of {vms} nodes (vCenter read whole, KV compared, all planned), {rounds} rounds"
        f" (ms): median {statistics.median(durations):7.1f}  max {max(durations):7.1f}"
        f"  (label patches sent: {patched})"
    )


def measure_simulator_floor(vc: Vcsim, hosts: int, vms: int, moves: int) -> None:
    """The same vMotions seen by bare WaitForUpdatesEx loops (no labeller): what vcsim adds, with
    the floor's filter (`runtime.host` of every VM) and with the labeller's own two feeds."""
    mover = vc.connect()
    inventory = read_placement(mover)
    host_moid = {name: moid for moid, name in inventory.host_name.items()}
    floors: tuple[tuple[str, Callable[[list[tuple[str, str]]], list[float]]], ...] = (
        ("bare WaitForUpdatesEx", lambda planned: simulator_floor(vc.connect(), mover, planned)),
        ("the labeller's VM feed", lambda planned: labeller_floor(vc.connect, mover, planned)),
    )
    for offset, (label, floor) in enumerate(floors):
        names = [
            (f"node-{(index * 53 + offset) % vms + 1}", host_moid[f"DC0_C0_H{index % hosts}"])
            for index in range(moves)
        ]
        planned = [(inventory.vm[vm], host) for vm, host in names if inventory.vm_host[vm] != host]
        ms = [d * 1000 for d in floor(planned)]
        print(
            f"  simulator floor: {label}, {len(ms)} moves (ms)".ljust(63)
            + f"median {statistics.median(ms):7.1f}  p99 {percentile(ms, 0.99):7.1f}"
        )
        inventory = read_placement(mover)  # the first round moved some VMs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--vms", type=int, default=2000)
    parser.add_argument("--moves", type=int, default=100)
    parser.add_argument("--unplaced", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        asyncio.run(run(args.hosts, args.vms, args.moves, args.unplaced, Path(workdir)))


if __name__ == "__main__":
    main()
