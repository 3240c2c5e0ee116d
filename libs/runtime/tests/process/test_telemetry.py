"""Telemetry setup and W3C trace-context propagation through message headers."""

import logging

import pytest
from opentelemetry import metrics, trace
from prometheus_client import REGISTRY, generate_latest

from hostaffinity.runtime.process.telemetry import (
    inject_trace_context,
    seconds_histogram,
    setup_telemetry,
)


def test_setup_twice_returns_the_installed_providers_without_overriding(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    first = setup_telemetry("hostaffinity-tests")
    second = setup_telemetry("hostaffinity-tests")

    assert second is first
    assert trace.get_tracer_provider() is first.tracer_provider
    assert metrics.get_meter_provider() is first.meter_provider
    assert not [r for r in caplog.records if "Overriding" in r.getMessage()]


def test_metrics_are_served_from_the_default_prometheus_registry() -> None:
    setup_telemetry("hostaffinity-tests")
    # With a description: every later /metrics in the session serves it, and promtool wants help.
    counter = metrics.get_meter(__name__).create_counter(
        "hostaffinity.test.ticks", description="ticks counted by a telemetry test"
    )

    counter.add(3, {"case": "registry"})

    exposition = generate_latest(REGISTRY).decode()
    assert "hostaffinity_test_ticks_total{" in exposition
    line = next(x for x in exposition.splitlines() if x.startswith("hostaffinity_test_ticks_total"))
    assert 'case="registry"' in line
    assert line.endswith(" 3.0")


def test_seconds_histogram_is_served_in_seconds_with_its_buckets() -> None:
    setup_telemetry("hostaffinity-tests")
    meter = metrics.get_meter(__name__)
    timed = seconds_histogram(meter, "hostaffinity_test_wait", "a wait", (0.5, 2.0))
    default = seconds_histogram(meter, "hostaffinity_test_plain_wait", "a wait")

    timed.record(1.0)
    default.record(1.0)

    exposition = generate_latest(REGISTRY).decode()
    assert "# HELP hostaffinity_test_wait_seconds a wait" in exposition
    assert _bucket_bounds(exposition, "hostaffinity_test_wait_seconds") == ["0.5", "2.0", "+Inf"]
    default_bounds = _bucket_bounds(exposition, "hostaffinity_test_plain_wait_seconds")
    assert "0.5" not in default_bounds
    assert len(default_bounds) > 3


def _bucket_bounds(exposition: str, histogram: str) -> list[str]:
    return [
        line.split('le="')[1].split('"')[0]
        for line in exposition.splitlines()
        if line.startswith(f"{histogram}_bucket{{")
    ]


def test_the_current_span_is_written_into_a_message_s_headers() -> None:
    setup_telemetry("hostaffinity-tests")
    headers: dict[str, str] = {"Nats-Msg-Id": "kept"}
    with trace.get_tracer(__name__).start_as_current_span("publish") as span:
        inject_trace_context(headers)
    sent = span.get_span_context()

    assert (
        headers["traceparent"]
        == f"00-{sent.trace_id:032x}-{sent.span_id:016x}-{sent.trace_flags:02x}"
    )
    assert headers["Nats-Msg-Id"] == "kept"
