"""The HTTP endpoints every service serves: /healthz, /readyz and /metrics.

/healthz says the process is alive; /readyz says it may take work, as the AND of named *parts*
(caches synced, a vCenter read). A part may be *declared* before its check exists: it fails
("not registered yet") until the work registers it, so /readyz never answers 200 in the moment
between NATS connecting and the work adding its parts.

A part may belong to a *unit*, one of several that do the same work for different ends (a vCenter
of several): the service is ready while at least one unit passes whole, and a failing part of
another unit is then *degraded*, named in the body and counted, not "not ready" for all. With one
unit, its failing part fails.

The body, one line a part after the verdict (docs/operating.md, "Readiness")::

    ready, degraded: vcenter connected: vc-b
    [+] nats connected
    [+] vcenter connected: vc-a
    [~] vcenter connected: vc-b: away since 2026-05-04T10:00:00Z: connection refused

/metrics exposes the Prometheus registry the OpenTelemetry exporter writes into, and after it
what this server alone knows: `hostaffinity_readiness_check{check}` (1 while the part does not
hold readiness back: it passes, or is degraded), `hostaffinity_readiness_degraded{check}` (1 while
the part fails but another unit serves) and the gauges its service adds (the runner's
`hostaffinity_leader`). These are per server, not in the process-wide registry, so services
sharing a process (as the end-to-end tests run them) each report their own.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import prometheus_client
from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hostaffinity.schema import utc_timestamp
from hostaffinity.schema.readiness import PartState, ReadinessPart, ServiceReadiness

ReadinessCheck = Callable[[], bool]
# Why a part does not pass, read only when it does not (e.g. "away since ...: refused").
ReadinessDetail = Callable[[], str]
GaugeRead = Callable[[], float]

NOT_REGISTERED = "not registered yet"
_MARKS = {"passes": "[+]", "fails": "[-]", "degraded": "[~]"}


@dataclass(frozen=True, slots=True)
class _Part:
    check: ReadinessCheck | None  # None: declared, not registered yet
    unit: str | None = None
    detail: ReadinessDetail | None = None


@dataclass(frozen=True, slots=True)
class Readiness:
    """Every part's state at one moment (each check read once)."""

    parts: list[ReadinessPart]

    @property
    def ready(self) -> bool:
        return not self.failing

    @property
    def failing(self) -> list[str]:
        return [part.name for part in self.parts if part.state == "fails"]

    @property
    def degraded(self) -> list[str]:
        return [part.name for part in self.parts if part.state == "degraded"]

    def body(self) -> str:
        """/readyz's text: the verdict, then one line a part."""
        if self.failing:
            verdict = "not ready: " + ", ".join(self.failing)
        elif self.degraded:
            verdict = "ready, degraded: " + ", ".join(self.degraded)
        else:
            verdict = "ready"
        lines = [verdict]
        for part in self.parts:
            line = f"{_MARKS[part.state]} {part.name}"
            lines.append(f"{line}: {part.detail}" if part.detail else line)
        return "\n".join(lines) + "\n"

    def summary(self) -> ServiceReadiness:
        """The verdict and the parts that do not pass, stamped now (for the Lease)."""
        return ServiceReadiness(
            ready=self.ready,
            parts=[part for part in self.parts if part.state != "passes"],
            at=utc_timestamp(),
        )


class _ServerGauges(Collector):
    """The readiness parts and added gauges of one HealthServer, read at scrape time."""

    def __init__(self, server: "HealthServer") -> None:
        self._server = server

    def collect(self) -> Iterable[Metric]:
        checks = GaugeMetricFamily(
            "hostaffinity_readiness_check",
            "1 while this part of /readyz does not hold readiness back (it passes, or is "
            "degraded), 0 while it does",
            labels=["check"],
        )
        degraded = GaugeMetricFamily(
            "hostaffinity_readiness_degraded",
            "1 while this part of /readyz fails but the service stays ready because another "
            "vCenter (unit) is served: a partial outage",
            labels=["check"],
        )
        for part in self._server.readiness().parts:
            checks.add_metric([part.name], 0.0 if part.state == "fails" else 1.0)
            degraded.add_metric([part.name], 1.0 if part.state == "degraded" else 0.0)
        yield checks
        yield degraded
        for name, (documentation, read) in self._server.gauges.items():
            yield GaugeMetricFamily(name, documentation, value=read())


class HealthServer:
    """Serves the three endpoints; readiness is the AND of named parts (see the module)."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._parts: dict[str, _Part] = {}
        self.gauges: dict[str, tuple[str, GaugeRead]] = {}
        self._registry = prometheus_client.CollectorRegistry(auto_describe=False)
        self._registry.register(_ServerGauges(self))
        self._runner: web.AppRunner | None = None
        self.port = port

    def declare(self, name: str) -> None:
        """A part that fails until `add_readiness_check` registers it (a no-op once it is)."""
        self._parts.setdefault(name, _Part(None))

    def add_readiness_check(
        self,
        name: str,
        check: ReadinessCheck,
        *,
        unit: str | None = None,
        detail: ReadinessDetail | None = None,
    ) -> None:
        """Register a condition /readyz waits for, e.g. "nodes informer synced"; with `unit`
        (a vCenter's name) the part is that unit's, degraded while another unit passes whole;
        `detail` says why it does not pass."""
        self._parts[name] = _Part(check, unit, detail)

    def add_gauge(self, name: str, documentation: str, read: GaugeRead) -> None:
        """Serve `name` on this server's /metrics, read at each scrape (e.g. leading or not)."""
        self.gauges[name] = (documentation, read)

    def readiness(self) -> Readiness:
        """Every part's state now."""
        passing = {
            name: part.check is not None and part.check() for name, part in self._parts.items()
        }
        units: dict[str, bool] = {}
        for name, part in self._parts.items():
            if part.unit is not None:
                units[part.unit] = units.get(part.unit, True) and passing[name]
        served = any(units.values())
        reports = []
        for name, part in self._parts.items():
            if passing[name]:
                reports.append(ReadinessPart(name=name, state="passes"))
                continue
            state: PartState = "degraded" if part.unit is not None and served else "fails"
            reports.append(ReadinessPart(name=name, state=state, detail=_why(part)))
        return Readiness(reports)

    def not_ready(self) -> list[str]:
        """Names of the parts that hold readiness back now."""
        return self.readiness().failing

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
        readiness = self.readiness()
        return web.Response(status=200 if readiness.ready else 503, text=readiness.body())

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(
            prometheus_client.REGISTRY
        ) + prometheus_client.generate_latest(self._registry)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )


def _why(part: _Part) -> str:
    if part.check is None:
        return NOT_REGISTERED
    return part.detail() if part.detail is not None else ""
