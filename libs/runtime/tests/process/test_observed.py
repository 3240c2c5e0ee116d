"""Observable instruments served from the reader given last (a service's parts built again in
one process report, not the first ones)."""

import functools

from opentelemetry.metrics import Observation
from prometheus_client import REGISTRY

from hostaffinity.runtime.process.observed import observe_latest
from hostaffinity.runtime.process.telemetry import setup_telemetry

METER = "hostaffinity.tests.observed"


def served(name: str) -> dict[str, float]:
    return {
        sample.labels.get("part", ""): sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == name
    }


def one_observation(value: int) -> list[Observation]:
    return [Observation(value)]


def test_a_gauge_reports_the_reader_given_last() -> None:
    setup_telemetry("hostaffinity-tests")
    observe_latest(
        METER, "hostaffinity_test_parts", lambda: [Observation(1, {"part": "first"})],
        description="parts of a test",
    )  # fmt: skip
    assert served("hostaffinity_test_parts") == {"first": 1.0}
    observe_latest(
        METER, "hostaffinity_test_parts", lambda: [Observation(2, {"part": "second"})],
        description="parts of a test",
    )  # fmt: skip
    assert served("hostaffinity_test_parts") == {"second": 2.0}


def test_an_observed_counter_reports_the_reader_given_last() -> None:
    setup_telemetry("hostaffinity-tests")
    for count in (5, 7):
        observe_latest(
            METER, "hostaffinity_test_dropped", functools.partial(one_observation, count),
            description="drops of a test", kind="counter",
        )  # fmt: skip
    assert served("hostaffinity_test_dropped_total") == {"": 7.0}
