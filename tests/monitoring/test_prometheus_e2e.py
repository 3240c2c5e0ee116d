"""A real Prometheus (Debian's package) on loopback scrapes the five services, run in-process on
vcsim, a nats-server and the Kubernetes double, while they do the work the dashboard and the
alerts watch: a vMotion labelled, evictions, a DRS rule repaired after a hand edit and a conflict,
a filter and an admission review answered, a topology value parked in the DLQ. Then every dashboard
panel's and every alert's expression is evaluated through Prometheus' HTTP API (each names only
metrics that exist; each panel returns data), the rules evaluate without error, every name
served follows Prometheus' conventions, and `promtool check metrics` is clean on each /metrics.

The services share this process and so the OpenTelemetry registry: each /metrics serves every
service's instruments, plus its own readiness checks and leadership. The `nats` job points at a
port where nothing listens: the prometheus-nats-exporter sidecar of k8s/components/monitoring is
not packaged in Debian, so only its `up` (here 0) is evaluated.

Each job is scraped as the Prometheus operator scrapes it from its PodMonitor (the pod's
namespace as a target label, the PodMonitor's honorLabels), so an alert's labels can be checked
against the workload that caused it: HostaffinityWorkloadsExposed names the exposed workload's
namespace, not hostaffinity. Since every job here serves every instrument, the jobs other than
the descheduler drop its exposure gauge, as a cluster's would not serve it.
"""

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pyVmomi import vim

from hostaffinity.descheduler.main import service_spec as descheduler_spec
from hostaffinity.descheduler.service import DeschedulerWork
from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.runtime.runner import running_service
from hostaffinity.schema import TOPOLOGY_BUCKET, node_key
from tests.e2e.descheduler_harness import (
    descheduler_config,
    node_object,
    pod_object,
    terminating,
    web_pod,
)
from tests.e2e.drs_harness import (
    cluster_of,
    drs_config,
    drs_state,
    pod_manifest,
    reconfigure,
    running_translator,
)
from tests.e2e.harness import eventually
from tests.e2e.labeller_harness import (
    labeller_config,
    relocate,
    running,
    wait_ready,
)
from tests.integration.extender_harness import RunningExtender, extender, filter_args
from tests.integration.webhook_harness import (
    FIXTURE,
    RunningWebhook,
    post,
    service,
    shipped_configuration,  # noqa: F401 (the fixture, used by name)
    written_ca,
)
from tests.monitoring.monitoring import alerts, dashboard_panels, tool
from tests.monitoring.prometheus_server import api, prometheus, until_answered
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer, free_port
from tests.platform.vcsim import VcsimFactory

# vcsim puts VM i on host i mod 3: node1 and node4 share host DC0_C0_H0.
NODES = ["node1", "node2", "node3", "node4"]
# A workload with both replicas on one ESXi host from the start: exposed.
EXPOSED_NAMESPACE = "shop"
# Counters an alert takes increase() of: each must be served from the start (at 0).
INCREASED = re.compile(r"increase\((hostaffinity_[a-z0-9_]+)")
PUBLISHERS = (
    "node-labeller", "drs-translator", "admission-webhook", "scheduler-extender", "descheduler",
)  # fmt: skip
RATE_INTERVAL = "15s"  # Grafana's $__rate_interval, for a 1 s scrape interval
# What Prometheus and prometheus_client add beside our instruments.
FOREIGN_PREFIXES = ("python_", "process_", "scrape_", "target_info", "up", "prometheus_")
METRIC = re.compile(r"\b(hostaffinity_[a-z0-9_]+|up)\b(?!\s*\()")
_vim: Any = vim


# Served by a descheduler whose install joined a fleet hub only (the services here run alone):
# tests/integration/test_fleet_hub.py reads them from the gauges on a fleet install.
FLEET_ONLY = frozenset(
    {"hostaffinity_fleet_exposed_replicas", "hostaffinity_fleet_view_since_contact_seconds"}
)


def metric_names(expr: str) -> set[str]:
    return set(METRIC.findall(expr))


def panel_queries() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", RATE_INTERVAL))
        for panel in dashboard_panels()
        for target in panel["targets"]
    ]


async def wait_for_series(http: aiohttp.ClientSession, base: str, names: set[str]) -> None:
    """Until Prometheus holds a series of every name (a histogram's as its buckets)."""
    missing = set(names)
    for _ in range(200):
        found = set(await api(http, base, "label/__name__/values"))
        missing = {n for n in names if n not in found and f"{n}_bucket" not in found}
        if not missing:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never scraped: {sorted(missing)}")


def check_names_follow_conventions(metadata: dict[str, list[dict[str, str]]]) -> None:
    """One prefix; counters end in _total; a family with a unit in its name has it last."""
    for family, entries in metadata.items():
        if family.startswith(FOREIGN_PREFIXES):
            continue
        assert family.startswith("hostaffinity_"), family
        kinds = {e["type"] for e in entries}
        if "counter" in kinds:
            assert family.endswith("_total"), family
        for unit in ("seconds", "bytes"):
            if f"_{unit}_" in family:
                assert family.endswith(f"_{unit}_total"), family


def promtool_check_metrics(text: str) -> str:
    result = subprocess.run(
        [tool("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (result.stdout + result.stderr).strip() if result.returncode else ""


@pytest.mark.usefixtures("shipped_configuration")
async def test_prometheus_evaluates_every_panel_and_alert_on_the_running_services(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    setup_telemetry("hostaffinity-tests")
    kube = kube_double
    vc = vcsim(hosts=3, vm_names=NODES)
    si = vc.connect()
    for name in [*NODES, "ghost"]:  # ghost: a Node no VM matches (Ready, as the others)
        kube.seed(node_object(name))
    kube.seed(web_pod("web-1", "node1"))
    kube.seed(web_pod("web-2", "node2"))
    # Two pods the DRS translator cannot express together: a conflict.
    kube.seed(pod_manifest("a", "node3", {"app": "a"}, apart_from={"app": "b"}))
    kube.seed(pod_manifest("b", "node1", {"app": "b"}, near={"app": "a"}))
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EXPOSED_NAMESPACE}})
    for name, node in (("shop-1", "node1"), ("shop-2", "node4")):
        kube.seed(pod_object(name, "shop", node, owner="shop-rs", affinity=None, namespace="shop"))

    descheduler = DeschedulerWork()
    async with (
        running(labeller_config(vc, nats_server, kubeconfig)) as labeller,
        extender(nats_server, kubeconfig) as ext,
        service(nats_server, kubeconfig, kube) as webhook,
        running_translator(
            drs_config(vc, nats_server, kubeconfig, drs=DrsSettings(resync_seconds=1.0))
        ) as drs,
        running_service(
            descheduler_spec(descheduler), descheduler_config(nats_server, kubeconfig)
        ) as desch,
    ):
        await wait_ready(labeller)
        health = {
            "node-labeller": labeller.runner.health.port,
            "scheduler-extender": ext.health_port,
            "admission-webhook": webhook.health_port,
            "drs-translator": drs.runner.health.port,
            "descheduler": desch.health.port,
            "nats": free_port(),
        }
        async with prometheus(tmp_path, health) as base, aiohttp.ClientSession() as http:
            await eventually(descheduler.synced, "descheduler synced", within=20)
            await check_counters_served_from_the_start(http, base)
            await check_exposure_alert_names_the_workloads_namespace(http, base)
            await do_the_watched_work(kube, si, ext, webhook, nats_server)
            await eventually(lambda: bool(terminating(kube)), "an eviction", within=10)
            watched = {n for _, e in panel_queries() for n in metric_names(e)}
            watched |= {n for a in alerts() for n in metric_names(a["expr"])}
            await wait_for_series(http, base, watched - FLEET_ONLY)
            await asyncio.sleep(2)  # a few more scrapes: rates over the window have two points

            empty = [
                (title, expr)
                for title, expr in panel_queries()
                if not (await api(http, base, "query", query=expr))["result"]
            ]
            assert empty == [], "dashboard queries without data"
            for alert in alerts():
                await api(http, base, "query", query=alert["expr"])  # evaluates
            groups = (await api(http, base, "rules"))["groups"]
            unhealthy = [r["name"] for g in groups for r in g["rules"] if r["health"] != "ok"]
            assert unhealthy == []
            assert len([r for g in groups for r in g["rules"]]) == len(alerts())

            nodes = await api(http, base, "query", query="hostaffinity_labeller_nodes")
            states = {s["metric"]["state"]: s["value"][1] for s in nodes["result"]}
            assert states == {"placed": "4", "unmatched": "1", "pending": "0"}
            # The first parked message is seen by the alert's increase(): its counter was
            # served at 0 before it.
            dead = await until_answered(http, base, alert_expr("HostaffinityDeadLettersGrowing"))
            assert {s["metric"]["service"] for s in dead} == {
                "descheduler",
                "drs-translator",
                "scheduler-extender",
            }
            leaders = await api(http, base, "query", query="hostaffinity_leader")
            assert {s["metric"]["job"]: s["value"][1] for s in leaders["result"]} == {
                "node-labeller": "1",
                "drs-translator": "1",
                "descheduler": "1",
            }
            check_names_follow_conventions(await api(http, base, "metadata"))

            problems = {}
            for job, port in health.items():
                if job == "nats":
                    continue
                async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                    text = await response.text()
                if found := promtool_check_metrics(text):
                    problems[job] = found
            assert problems == {}


def alert_expr(name: str) -> str:
    (expr,) = [a["expr"] for a in alerts() if a["alert"] == name]
    return str(expr)


async def check_counters_served_from_the_start(http: aiohttp.ClientSession, base: str) -> None:
    """Every counter an alert takes increase() of is served from its job's first scrape on, and
    every publisher has its outbox series: the first event is then an increase, not a new series.

    Each service serves its counters at 0 from its start (a fresh process); here the services
    share the test process's meter provider, so an earlier test may have counted already and the
    value says nothing. What is checked is that no scrape of the job lacked the series."""
    counters = {name for a in alerts() for name in INCREASED.findall(a["expr"])}
    assert counters
    for name in counters:
        await until_answered(
            http,
            base,
            f"count_over_time({name}[10m]) == on(job) group_left() count_over_time(up[10m])",
        )
    dropped = await until_answered(http, base, "hostaffinity_bus_outbox_dropped_total")
    assert {s["metric"]["outbox"] for s in dropped} >= set(PUBLISHERS)


async def check_exposure_alert_names_the_workloads_namespace(
    http: aiohttp.ClientSession, base: str
) -> None:
    """The alert (pending: its `for` has not passed) carries the workload's namespace."""
    found = await until_answered(http, base, 'ALERTS{alertname="HostaffinityWorkloadsExposed"}')
    assert {s["metric"]["namespace"] for s in found} == {EXPOSED_NAMESPACE}


async def do_the_watched_work(
    kube: KubeDouble,
    si: vim.ServiceInstance,
    extender: RunningExtender,
    webhook: RunningWebhook,
    nats: NatsServer,
) -> None:
    """What the panels and alerts watch, done once each."""
    url = f"http://127.0.0.1:{extender.server.port}/filter"
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=filter_args(kube, "web-1", NODES)) as response,
    ):
        assert response.status == 200
    review = json.loads(FIXTURE.read_text())["reviews"][0]["request_body"]
    ca = written_ca(kube)
    assert ca is not None
    status, _ = await post(webhook, json.dumps(review).encode(), ca)
    assert status == 200
    # A rule of ours deleted by hand: repaired at the next resync, counted as drift.
    await eventually(lambda: bool(ours(si)), "the translator's first rule", within=15)
    (key,) = ours(si)
    reconfigure(
        si,
        _vim.cluster.ConfigSpecEx(
            rulesSpec=[_vim.cluster.RuleSpec(operation="remove", removeKey=key)]
        ),
    )
    await eventually(lambda: bool(ours(si)), "the rule repaired", within=10)
    # A topology value no watch can decode: each service watching the topology parks it.
    async with nats.connection("monitoring-test") as bus:
        await (await bus.js.key_value(TOPOLOGY_BUCKET)).put(node_key("garbage"), b"[]")
    # The vMotion that puts both web replicas on one host: labelled, then one is evicted.
    relocate(si, "node2", "DC0_C0_H0")


def ours(si: vim.ServiceInstance) -> list[int]:
    """Keys of the translator's anti-affinity rules in vcsim."""
    names = {
        v["name"]
        for v in drs_state(si).values()
        if v["name"].startswith("hostaffinity-") and v["_type"].endswith("AntiAffinityRuleSpec")
    }
    return [r.key for r in cluster_of(si).configurationEx.rule if r.name in names]
