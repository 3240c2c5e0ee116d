"""Traces leave over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set, and not otherwise.

A service process is stood in for by a child Python (OpenTelemetry's providers are process-wide
and set once); a local HTTP server plays the collector.
"""

import asyncio
import os
import sys

from aiohttp import web

SERVICE = """
from opentelemetry import trace
from hostaffinity.runtime.process.telemetry import setup_telemetry
telemetry = setup_telemetry("hostaffinity-otlp-test")
with trace.get_tracer("test").start_as_current_span("publish hostaffinity.events.vm.moved"):
    pass
telemetry.shutdown()
"""


async def run_service(endpoint: str | None) -> list[bytes]:
    received: list[bytes] = []

    async def collect(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint is not None:
        environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint.format(port=port)
    try:
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVICE, env=environment)
        assert await asyncio.wait_for(child.wait(), 30) == 0
    finally:
        await runner.cleanup()
    return received


async def test_spans_are_exported_when_an_endpoint_is_configured() -> None:
    received = await run_service("http://127.0.0.1:{port}")
    assert len(received) == 1
    assert b"publish hostaffinity.events.vm.moved" in received[0]
    assert b"hostaffinity-otlp-test" in received[0]


async def test_nothing_is_exported_without_an_endpoint() -> None:
    assert await run_service(None) == []
