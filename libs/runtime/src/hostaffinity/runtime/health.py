"""The HTTP endpoints every service serves: /healthz, /readyz and /metrics.

/healthz says the process is alive; /readyz says it may take work (caches synced, leader known);
/metrics exposes the Prometheus registry the OpenTelemetry exporter writes into.
"""

from collections.abc import Callable

import prometheus_client
from aiohttp import web

ReadinessCheck = Callable[[], bool]


class HealthServer:
    """Serves the three endpoints; readiness is the AND of named checks."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._checks: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None
        self.port = port

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        """Register a condition /readyz waits for, e.g. "nodes informer synced"."""
        self._checks[name] = check

    def not_ready(self) -> list[str]:
        """Names of the checks that do not pass now."""
        return [name for name, check in self._checks.items() if not check()]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        # With port 0 the OS picks the port; tests read it back from the bound address.
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        waiting = self.not_ready()
        if waiting:
            return web.Response(status=503, text="not ready: " + ", ".join(waiting) + "\n")
        return web.Response(text="ready\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )
