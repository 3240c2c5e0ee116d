"""A leader-elected service through the runner rides out a killed API server (issue 9's table:
kube-apiserver SIGKILL, down 8 s) with the production Lease (15 s, renew deadline 10 s, retry
2 s): the process goes on, it keeps leading (a renewal gets through once the API is back, within
the renew deadline), its work converges afterwards and nothing is left running.
"""

import asyncio
import time
from dataclasses import dataclass, field

from hostaffinity.runtime.config import KubernetesSettings, LeaseSettings
from hostaffinity.runtime.leader import LeaderElector
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.labeller_harness import LabellerParts, eventually, node_labels, relocate
from tests.e2e.test_labeller_faults import NODES, converges

OUTAGE_SECONDS = 8.0
PRODUCTION_LEASE = LeaseSettings(namespace="kube-system")


@dataclass
class LeadershipTrace:
    """`is_leader` sampled every 50 ms, and the first time it was seen false."""

    samples: int = 0
    lost_at: float | None = None
    renewed_at_loss: float = 0.0
    renewals: list[float] = field(default_factory=list)

    async def follow(self, elector: LeaderElector) -> None:
        while True:
            self.samples += 1
            if elector.renewed_at not in self.renewals:
                self.renewals.append(elector.renewed_at)
            if not elector.is_leader and self.lost_at is None:
                self.lost_at, self.renewed_at_loss = time.monotonic(), elector.renewed_at
            await asyncio.sleep(0.05)


async def test_labeller_keeps_leading_through_an_eight_second_api_kill(
    parts: LabellerParts,
) -> None:
    vc, admin = parts.vcenter(vms=6, nodes=NODES)
    kubernetes = KubernetesSettings(kubeconfig=str(parts.kubeconfig), request_timeout_seconds=2.0)
    async with parts.labeller(vc, lease=PRODUCTION_LEASE, kubernetes=kubernetes) as replica:
        runner, elector = replica.runner, replica.runner.elector
        assert elector is not None
        trace = LeadershipTrace()
        follower = asyncio.create_task(trace.follow(elector))
        try:
            # Right after a renewal: the API comes back 2 s before the renew deadline.
            renewed = elector.renewed_at
            await eventually(lambda: elector.renewed_at != renewed, "a renewal", 5.0)
            await parts.kube.kill()
            killed_at = time.monotonic()
            await asyncio.to_thread(relocate, admin, "node-1", "DC0_C0_H2")
            await asyncio.sleep(OUTAGE_SECONDS - (time.monotonic() - killed_at))
            await parts.kube.revive()
            await converges(parts.kube, admin, parts.nats)
            assert node_labels(parts.kube, "node-1")[LABEL_ESXI_HOST] == "DC0_C0_H2"
            await asyncio.sleep(PRODUCTION_LEASE.retry_period_seconds * 2)
        finally:
            follower.cancel()
        assert runner.working.is_set()
        assert not runner.stopping
        assert trace.lost_at is None, (trace.lost_at - killed_at, trace.renewals)
        assert elector.is_leader
        assert max(trace.renewals) > killed_at + OUTAGE_SECONDS
