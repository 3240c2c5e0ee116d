"""`hostaffinity_workloads_exposed{namespace}` from the extender's cache."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from hostaffinity.affinity.model import ObjectMeta, OwnerReference, Pod, PodSpec
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.scheduler_extender.cache import ExtenderCache
from hostaffinity.scheduler_extender.exposure_gauge import ExposureGauge
from hostaffinity.scheduler_extender.metrics import ExtenderMetrics

HOSTS = {"n1": "esx-a", "n2": "esx-a", "n3": "esx-b"}
MakeCache = Callable[..., ExtenderCache]


def replica(namespace: str, index: int, node: str, app: str = "web") -> Pod:
    owner = OwnerReference(kind="StatefulSet", name=app, uid=f"{namespace}-{app}", controller=True)
    return Pod(
        metadata=ObjectMeta(
            name=f"{app}-{index}", namespace=namespace, labels={"app": app},
            owner_references=[owner],
        ),
        spec=PodSpec(node_name=node),
    )  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counts_exposed_workloads_per_namespace(make_cache: MakeCache) -> None:
    pods = [
        *(replica("shop", i, node) for i, node in enumerate(("n1", "n2", "n3"))),
        *(replica("bank", i, node) for i, node in enumerate(("n1", "n3"))),  # spread
    ]
    assert ExposureGauge(make_cache(HOSTS, pods)).counts() == {"shop": 1}


def test_recounts_only_after_the_refresh_interval_and_reports_zero_once_fixed(
    make_cache: MakeCache,
) -> None:
    cache = make_cache(HOSTS, [replica("shop", i, n) for i, n in enumerate(("n1", "n2"))])
    clock = Clock()
    gauge = ExposureGauge(cache, refresh_seconds=30.0, clock=clock)
    assert gauge.counts() == {"shop": 1}
    cache.upsert_pod(replica("shop", 1, "n3"))  # the replica moved to the other host
    clock.now = 29.0
    assert gauge.counts() == {"shop": 1}
    clock.now = 30.0
    assert gauge.counts() == {"shop": 0}


def test_nothing_while_the_cache_is_loading(make_cache: MakeCache) -> None:
    pods = [replica("shop", i, n) for i, n in enumerate(("n1", "n2"))]
    assert ExposureGauge(make_cache(HOSTS, pods, synced=False)).counts() == {}


@pytest.fixture
def telemetry() -> None:
    setup_telemetry("hostaffinity-tests")


@pytest.mark.usefixtures("telemetry")
def test_the_gauge_reaches_metrics(make_cache: MakeCache) -> None:
    namespace = "gauge-test"  # other tests' caches report their own namespaces
    ExtenderMetrics(
        make_cache(HOSTS, [replica(namespace, i, n) for i, n in enumerate(("n1", "n2"))])
    )
    samples = [
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "hostaffinity_workloads_exposed"
        and sample.labels.get("namespace") == namespace
    ]
    assert samples == [1.0]
