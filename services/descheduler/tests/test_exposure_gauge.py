"""`hostaffinity_workloads_exposed{namespace}` from the descheduler's state."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from hostaffinity.descheduler.core.kubevirt import VirtualMachineInstance
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.exposure_gauge import ExposureGauge
from hostaffinity.runtime.process.telemetry import setup_telemetry
from tests.platform.builders.descheduler import cluster, launcher, node, pod, vmi

HOSTS = {"n1": "esx-a", "n2": "esx-a", "n3": "esx-b"}
NODES = [node(name) for name in HOSTS]


def replicas(namespace: str, nodes: tuple[str, ...], app: str = "web") -> list[DeschedulerPod]:
    return [
        pod(f"{app}-{i}", n, {"app": app}, namespace=namespace, owner=("StatefulSet", app))
        for i, n in enumerate(nodes)
    ]


def state_of(*pods: DeschedulerPod, vmis: tuple[VirtualMachineInstance, ...] = ()) -> ClusterState:
    namespaces: dict[str, dict[str, str]] = {ns: {} for ns in ("default", "shop", "bank", "gt")}
    return cluster(NODES, pods, placements=HOSTS, namespaces=namespaces, vmis=vmis)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def synced() -> bool:
    return True


def test_counts_exposed_workloads_per_namespace() -> None:
    state = state_of(*replicas("shop", ("n1", "n2", "n3")), *replicas("bank", ("n1", "n3")))
    assert ExposureGauge(state, synced).counts() == {"shop": 1}


def test_recounts_only_after_the_refresh_interval_and_reports_zero_once_fixed() -> None:
    state = state_of(*replicas("shop", ("n1", "n2")))
    clock = Clock()
    gauge = ExposureGauge(state, synced, refresh_seconds=30.0, clock=clock)
    assert gauge.counts() == {"shop": 1}
    (moved,) = replicas("shop", ("n1", "n3"))[1:]  # the replica moved to the other host
    state.upsert_pod(moved)
    clock.now = 29.0
    assert gauge.counts() == {"shop": 1}
    clock.now = 30.0
    assert gauge.counts() == {"shop": 0}


def test_nothing_while_the_state_is_loading() -> None:
    state = state_of(*replicas("shop", ("n1", "n2")))
    assert ExposureGauge(state, lambda: False).counts() == {}


def test_vm_replicas_count_as_their_owners_workload_as_the_cli_counts_them() -> None:
    """Two VMs of one VirtualMachineInstanceReplicaSet on one ESXi host: one exposed workload
    (`hostaffinity exposure` groups launcher pods by the VMI's controller too); a VM of its own
    on that host is a workload of one replica, not exposed."""
    owner = ("VirtualMachineInstanceReplicaSet", "vm-db")
    state = state_of(
        launcher("vm-db-0", "n1"),
        launcher("vm-db-1", "n2"),
        launcher("lonely", "n1"),
        vmis=(
            vmi("vm-db-0", "n1", owner=owner),
            vmi("vm-db-1", "n2", owner=owner),
            vmi("lonely", "n1"),
        ),
    )
    assert ExposureGauge(state, synced).counts() == {"default": 1}


@pytest.fixture
def telemetry() -> None:
    setup_telemetry("hostaffinity-tests")


@pytest.mark.usefixtures("telemetry")
def test_the_newest_gauge_reaches_metrics() -> None:
    namespace = "gt"  # other tests' gauges report their own namespaces
    ExposureGauge(state_of(*replicas("bank", ("n1", "n3"))), synced)
    ExposureGauge(state_of(*replicas(namespace, ("n1", "n2"))), synced)
    samples = {
        sample.labels["namespace"]: sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "hostaffinity_workloads_exposed"
    }
    assert samples == {namespace: 1.0}
