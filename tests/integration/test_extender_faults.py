"""scheduler-extender with NATS (and the API) taken away while a VM moves: it may say "not ready"
and answer `Error`, but never "ready" with a placement older than the move for long.

Real parts: a real nats-server stopped and started on the same port and store, vcsim with a
RelocateVM_Task, the real node-labeller writing the topology KV, the Kubernetes double.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import msgspec
import yaml

from hostaffinity.node_labeller.config import NodeLabellerConfig
from tests.e2e.labeller_harness import (
    labeller_config,
    relocate,
    running,
    wait_ready,
)
from tests.integration.extender_harness import RunningExtender, extender, filter_args, seed_004
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

SAMPLE_SECONDS = 0.1
STALE_READY_LIMIT_SECONDS = 2.0
RECOVERY_LIMIT_SECONDS = 30.0
NODES = ["node1", "node2", "node3"]


@dataclass(frozen=True)
class Sample:
    at: float
    ready: bool
    knows_move: bool | None  # None: the filter answered Error (no decision)
    stale_seconds: float  # the staleness metric's value for the placements


class Sampler:
    """Every 100 ms: /readyz, and whether the filter of p3 (anti-affine to p1 on node1's host)
    rejects node3, which is true only once the extender knows node3 moved to node1's host."""

    def __init__(self, running_ext: RunningExtender, kube: KubeDouble) -> None:
        self._ext = running_ext
        self._kube = kube
        self.samples: list[Sample] = []

    async def _one(self, http: aiohttp.ClientSession) -> Sample:
        ready_url = f"http://127.0.0.1:{self._ext.health_port}/readyz"
        filter_url = f"http://127.0.0.1:{self._ext.server.port}/filter"
        async with http.get(ready_url) as response:
            ready = response.status == 200
        body = filter_args(self._kube, "p3", NODES)
        async with http.post(filter_url, json=body) as response:
            answer = await response.json()
        knows = None if answer["Error"] else "node3" in answer["FailedNodes"]
        stale = self._ext.feeds.stale()["placements"]
        return Sample(time.monotonic(), ready, knows, stale)

    async def run(self) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                self.samples.append(await self._one(http))
                await asyncio.sleep(SAMPLE_SECONDS)

    def longest_ready_and_stale(self, since: float) -> float:
        """The longest run of samples after `since` answering ready with the pre-move view."""
        longest, start = 0.0, None
        for sample in self.samples:
            if sample.at < since:
                continue
            if sample.ready and sample.knows_move is False:
                start = sample.at if start is None else start
                longest = max(longest, sample.at - start + SAMPLE_SECONDS)
            else:
                start = None
        return longest


@contextlib.asynccontextmanager
async def labeller_deployment(config: NodeLabellerConfig, workdir: Path) -> AsyncIterator[None]:
    """The node-labeller as production runs it: its own process (the console script), started
    again 1 s after it exits, as a Deployment's kubelet would (it exits when it loses its Lease,
    which an 8 s API outage makes it do)."""
    path = workdir / "node-labeller.yaml"
    path.write_text(yaml.safe_dump(msgspec.to_builtins(config)), encoding="utf-8")
    program = Path(sys.executable).parent / "hostaffinity-node-labeller"
    current: list[asyncio.subprocess.Process] = []

    async def restart_forever() -> None:
        with (workdir / "node-labeller.log").open("ab") as log:
            while True:
                process = await asyncio.create_subprocess_exec(
                    str(program), "--config", str(path), stdout=log, stderr=log
                )
                current[:] = [process]
                await process.wait()
                await asyncio.sleep(1.0)

    async with asyncio.TaskGroup() as group:
        restarting = group.create_task(restart_forever())
        try:
            yield
        finally:
            restarting.cancel()
            for process in current:
                if process.returncode is None:
                    process.terminate()
                    await process.wait()


async def until(sampler: Sampler, within: float) -> float:
    """Seconds until the extender is ready and answers with the move known."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        last = sampler.samples[-1] if sampler.samples else None
        if last is not None and last.ready and last.knows_move:
            return time.monotonic() - started
        await asyncio.sleep(SAMPLE_SECONDS)
    raise AssertionError(f"extender did not learn the move within {within}s of recovery")


async def test_a_vm_moved_while_nats_was_down_never_leaves_the_extender_ready_and_stale(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, tmp_path: Path
) -> None:
    vc = seed_004(vcsim, kube_double)
    kubeconfig = kube_double.write_kubeconfig(tmp_path / "kubeconfig")
    async with running(labeller_config(vc, nats_server, kubeconfig)) as labeller:
        await wait_ready(labeller)
        async with extender(nats_server, kubeconfig) as running_ext:
            sampler = Sampler(running_ext, kube_double)
            async with asyncio.TaskGroup() as group:
                sampling = group.create_task(sampler.run())
                await asyncio.sleep(1.0)
                assert sampler.samples[-1].ready
                assert sampler.samples[-1].knows_move is False
                await nats_server.stop()
                await asyncio.sleep(1.0)
                await asyncio.to_thread(relocate, vc.connect(), "node3", "DC0_C0_H0")
                moved = time.monotonic()
                await asyncio.sleep(9.0)
                await nats_server.start()
                took = await until(sampler, RECOVERY_LIMIT_SECONDS)
                sampling.cancel()
            assert sampler.longest_ready_and_stale(moved) <= STALE_READY_LIMIT_SECONDS, (
                f"ready with the pre-move placement for "
                f"{sampler.longest_ready_and_stale(moved):.1f}s; learned the move {took:.1f}s "
                "after NATS came back"
            )
            down = [s for s in sampler.samples if moved + 1.0 < s.at < moved + 8.0]
            assert down
            assert not any(s.ready for s in down), "ready while NATS was down"
            assert all(s.knows_move is None for s in down), "decided while NATS was down"
            # The staleness window is measured: it grows while NATS is away, 0 once live again.
            assert down[-1].stale_seconds > down[0].stale_seconds > 0
            assert sampler.samples[-1].stale_seconds == 0


async def test_after_nats_down_10s_and_the_api_down_8s_answers_equal_vcenter_within_30s(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, tmp_path: Path
) -> None:
    vc = seed_004(vcsim, kube_double)
    kubeconfig = kube_double.write_kubeconfig(tmp_path / "kubeconfig")
    api_port = int(kube_double.url.rsplit(":", 1)[1])
    deployed = labeller_deployment(labeller_config(vc, nats_server, kubeconfig), tmp_path)
    async with deployed, extender(nats_server, kubeconfig) as running_ext:
        url = f"http://127.0.0.1:{running_ext.server.port}/filter"
        body = filter_args(kube_double, "p3", NODES)

        async def answer() -> tuple[list[str], list[str]] | None:
            async with aiohttp.ClientSession() as http, http.post(url, json=body) as reply:
                got = await reply.json()
            return None if got["Error"] else (got["NodeNames"], sorted(got["FailedNodes"]))

        before = (["node3"], ["node1", "node2"])
        started = time.monotonic()
        while (latest := await answer()) != before:  # the labeller's first placements
            assert time.monotonic() - started < RECOVERY_LIMIT_SECONDS, latest
            await asyncio.sleep(SAMPLE_SECONDS)
        await nats_server.stop()
        await kube_double.stop()
        si = vc.connect()
        # Two moves during the outage: node3 joins node1's host, node2 leaves it.
        await asyncio.to_thread(relocate, si, "node3", "DC0_C0_H0")
        await asyncio.to_thread(relocate, si, "node2", "DC0_C0_H1")
        await asyncio.sleep(8.0)
        await kube_double.start(port=api_port)
        await asyncio.sleep(2.0)
        await nats_server.start()
        recovered = time.monotonic()
        truth = (["node2"], ["node1", "node3"])
        while (latest := await answer()) != truth:
            assert time.monotonic() - recovered < RECOVERY_LIMIT_SECONDS, latest
            await asyncio.sleep(SAMPLE_SECONDS)
