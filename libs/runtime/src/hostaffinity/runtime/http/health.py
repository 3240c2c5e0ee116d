"""The HTTP endpoints every service serves: /healthz, /readyz and /metrics.

/healthz says the process is alive; /readyz says it may take work (caches synced, leader known);
/metrics exposes the Prometheus registry the OpenTelemetry exporter writes into, and after it
what this server alone knows: `hostaffinity_readiness_check{check}` (1 while the part of /readyz
passes, 0 while it does not) and the gauges its service adds (the runner's `hostaffinity_leader`).
These are per server, not in the process-wide registry, so services sharing a process (as the
end-to-end tests run them) each report their own.
"""

from collections.abc import Callable, Iterable

import prometheus_client
from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

ReadinessCheck = Callable[[], bool]
GaugeRead = Callable[[], float]


class _ServerGauges(Collector):
    """The readiness checks and added gauges of one HealthServer, read at scrape time."""

    def __init__(self, server: "HealthServer") -> None:
        self._server = server

    def collect(self) -> Iterable[Metric]:
        checks = GaugeMetricFamily(
            "hostaffinity_readiness_check",
            "1 while this part of /readyz passes, 0 while it does not",
            labels=["check"],
        )
        for name, check in self._server.checks.items():
            checks.add_metric([name], 1.0 if check() else 0.0)
        yield checks
        for name, (documentation, read) in self._server.gauges.items():
            yield GaugeMetricFamily(name, documentation, value=read())


class HealthServer:
    """Serves the three endpoints; readiness is the AND of named checks."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self.checks: dict[str, ReadinessCheck] = {}
        self.gauges: dict[str, tuple[str, GaugeRead]] = {}
        self._registry = prometheus_client.CollectorRegistry(auto_describe=False)
        self._registry.register(_ServerGauges(self))
        self._runner: web.AppRunner | None = None
        self.port = port

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        """Register a condition /readyz waits for, e.g. "nodes informer synced"."""
        self.checks[name] = check

    def add_gauge(self, name: str, documentation: str, read: GaugeRead) -> None:
        """Serve `name` on this server's /metrics, read at each scrape (e.g. leading or not)."""
        self.gauges[name] = (documentation, read)

    def not_ready(self) -> list[str]:
        """Names of the checks that do not pass now."""
        return [name for name, check in self.checks.items() if not check()]

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
        body = prometheus_client.generate_latest(
            prometheus_client.REGISTRY
        ) + prometheus_client.generate_latest(self._registry)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )
