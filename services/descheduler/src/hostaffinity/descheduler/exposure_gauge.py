"""`hostaffinity_workloads_exposed{namespace}`: the `hostaffinity exposure` figure, for alerting.

Served by the descheduler because it is in every install (k8s/base) and already holds what the
count needs: every assigned pod, node, namespace and placement in the engine's index, plus the
VMIs whose owners make VM replicas one workload, as the CLI groups them. Only the Lease holder
runs the work, so the cluster has one series per namespace. Counted by the affinity library's
exposure module, the one the CLI uses.

A count walks every assigned pod (~0.15 s at 150,000 pods, bench/cli_bench.py) on the event
loop the cycles share, so it is refreshed at most every `refresh_seconds` whatever the scrape
interval, and never while a cycle's planned moves are shown (a scrape is served between cycles:
a cycle awaits nothing). A namespace that had exposed workloads reports 0 once it has none, so
an alert on it resolves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

from opentelemetry.metrics import Observation

from hostaffinity.affinity.exposure import exposed_per_namespace
from hostaffinity.affinity.workloads import WorkloadRef
from hostaffinity.descheduler.core.kubevirt import vm_owner
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.metrics import METER
from hostaffinity.runtime.process.observed import observe_latest

REFRESH_SECONDS: Final = 30.0
NAME: Final = "hostaffinity_workloads_exposed"


class ExposureGauge:
    """Exposed workloads per namespace, recounted when older than `refresh_seconds`; the newest
    instance is the one /metrics serves."""

    def __init__(
        self,
        state: ClusterState,
        synced: Callable[[], bool],
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self._synced = synced
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._counted_at: float | None = None
        self._counts: dict[str, int] = {}
        observe_latest(
            METER,
            NAME,
            lambda: [Observation(n, {"namespace": ns}) for ns, n in self.counts().items()],
            description="Workloads with two or more replicas on one ESXi host, per namespace",
        )

    def counts(self) -> Mapping[str, int]:
        """Per namespace; nothing until the state holds the whole cluster."""
        if not self._synced():
            return {}
        now = self._clock()
        if self._counted_at is None or now - self._counted_at >= self._refresh_seconds:
            fresh = exposed_per_namespace(self._state.index, self._vmi_owners())
            self._counts = {**dict.fromkeys(self._counts, 0), **fresh}
            self._counted_at = now
        return self._counts

    def _vmi_owners(self) -> dict[tuple[str, str], WorkloadRef]:
        """(namespace, VMI) -> the VMI's controller, as `hostaffinity exposure` reads them."""
        owners = {}
        for vmi in self._state.vmis.values():
            owner = vm_owner(vmi)
            if owner is not None:
                kind, name = owner
                namespace = vmi.metadata.namespace
                owners[(namespace, vmi.metadata.name)] = WorkloadRef(kind, namespace, name)
        return owners
