"""OpenTelemetry for a service: metrics on `/metrics`, traces over OTLP, trace context in headers.

Metrics go through the Prometheus exporter into prometheus_client's default REGISTRY, so the
health server serves them with `generate_latest()`. Traces are always recorded (so an event
carries its publisher's trace context to whoever reads it) and exported only when
`OTEL_EXPORTER_OTLP_ENDPOINT` is set.
OpenTelemetry lets a process set its global providers once; `setup_telemetry` therefore installs
them on the first call and hands back the same providers on every later call.
"""

import logging
import os
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"

_log = logging.getLogger(__name__)
_propagator = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class Telemetry:
    """The providers installed for this process; `shutdown` flushes them on SIGTERM."""

    service: str
    meter_provider: MeterProvider
    tracer_provider: TracerProvider

    def shutdown(self) -> None:
        """Export what is buffered (spans, last metrics) before the process exits."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


_installed: Telemetry | None = None


def setup_telemetry(service: str) -> Telemetry:
    """Install the global meter and tracer providers once; later calls return the same ones."""
    global _installed
    if _installed is not None:
        if _installed.service != service:
            _log.warning(
                "telemetry already set up for %r; keeping it for %r", _installed.service, service
            )
        return _installed
    resource = Resource.create({SERVICE_NAME: service})
    meter_provider = MeterProvider(resource=resource, metric_readers=[PrometheusMetricReader()])
    tracer_provider = TracerProvider(resource=resource)
    if os.environ.get(OTLP_ENDPOINT_ENV):
        # The exporter reads the endpoint (and headers, timeout) from the standard variables.
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    metrics.set_meter_provider(meter_provider)
    trace.set_tracer_provider(tracer_provider)
    _installed = Telemetry(service, meter_provider, tracer_provider)
    return _installed


def seconds_histogram(
    meter: metrics.Meter,
    name: str,
    description: str,
    buckets: Sequence[float] | None = None,
) -> metrics.Histogram:
    """A duration histogram, served as `<name>_seconds`; `buckets` are the bounds fitting what
    it times (the SDK's default bounds suit milliseconds, not seconds)."""
    return meter.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=buckets
    )


def inject_trace_context(headers: MutableMapping[str, str], context: Context | None = None) -> None:
    """Write W3C `traceparent` (and `tracestate`) of the current or given context into headers."""
    _propagator.inject(headers, context=context)
