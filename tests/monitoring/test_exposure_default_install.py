"""HostaffinityWorkloadsExposed fires in the default install, without the optional extender.

The default install (k8s/base with k8s/components/monitoring) runs node-labeller, drs-translator,
admission-webhook and descheduler; the exposure gauge comes from the descheduler. Here a real
Prometheus scrapes the descheduler alone, run in-process on a real nats-server and the
Kubernetes double, as the Prometheus operator scrapes it from its shipped PodMonitor (target
labels namespace=hostaffinity, the PodMonitor's honorLabels). Two replicas of a StatefulSet in
`shop` sit on two node VMs of one ESXi host (the nodes labelled as the node-labeller labels
them); a third namespace's replicas are on two hosts.

The shipped alert is evaluated as written, except its `for: 15m`, shortened so that it fires
within the test: it must fire with the exposed namespace's label (not hostaffinity), and the
dashboard's first panel must show that namespace's count.
"""

import copy
from pathlib import Path
from typing import Any

import aiohttp

from hostaffinity.descheduler.main import service_spec as descheduler_spec
from hostaffinity.descheduler.service import DeschedulerWork
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.runtime.runner import running_service
from hostaffinity.schema import LABEL_ESXI_HOST
from tests.e2e.descheduler_harness import descheduler_config, node_object, pod_object
from tests.e2e.harness import eventually
from tests.monitoring.monitoring import dashboard_panels, pod_monitors, rule_groups
from tests.monitoring.prometheus_server import api, prometheus, until_answered
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer

ALERT = "HostaffinityWorkloadsExposed"
HOSTS = {"node1": "esx-a", "node2": "esx-a", "node3": "esx-b"}
DEFAULT_INSTALL = ("node-labeller", "drs-translator", "admission-webhook", "descheduler")


def rules_firing_at_once() -> dict[str, Any]:
    """The shipped rules with the exposure alert's `for` shortened to 2 s."""
    groups = copy.deepcopy(rule_groups())
    (alert,) = (r for g in groups["groups"] for r in g["rules"] if r.get("alert") == ALERT)
    assert alert["for"] == "15m", "the shipped alert changed: say so in this test"
    alert["for"] = "2s"
    return groups


def exposure_panel_query() -> str:
    (panel,) = (p for p in dashboard_panels() if p["title"] == "Workloads exposed, per namespace")
    (target,) = panel["targets"]
    return str(target["expr"])


def test_the_default_install_has_a_podmonitor_for_the_descheduler_keeping_its_labels() -> None:
    monitors = pod_monitors()
    assert set(DEFAULT_INSTALL) <= set(monitors)
    (endpoint,) = monitors["descheduler"]["spec"]["podMetricsEndpoints"]
    assert endpoint.get("honorLabels") is True


async def test_exposure_alert_fires_from_the_descheduler_alone(
    nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    setup_telemetry("hostaffinity-tests")
    kube = kube_double
    for name, host in HOSTS.items():
        kube.seed(node_object(name, {LABEL_ESXI_HOST: host}))
    for namespace in ("shop", "bank"):
        kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for name, node in (("shop-0", "node1"), ("shop-1", "node2")):
        kube.seed(pod_object(name, "shop", node, owner="shop", affinity=None, namespace="shop"))
    for name, node in (("bank-0", "node1"), ("bank-1", "node3")):
        kube.seed(pod_object(name, "bank", node, owner="bank", affinity=None, namespace="bank"))

    descheduler = DeschedulerWork()
    async with running_service(
        descheduler_spec(descheduler), descheduler_config(nats_server, kubeconfig)
    ) as running:
        await eventually(descheduler.synced, "descheduler synced", within=20)
        jobs = {"descheduler": running.health.port}
        async with (
            prometheus(tmp_path, jobs, rules_firing_at_once()) as base,
            aiohttp.ClientSession() as http,
        ):
            firing = await until_answered(
                http, base, f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}'
            )
            assert [(a["metric"]["namespace"], a["metric"]["severity"]) for a in firing] == [
                ("shop", "warning")
            ]
            panel = await api(http, base, "query", query=exposure_panel_query())
            shown = {s["metric"]["namespace"]: s["value"][1] for s in panel["result"]}
            assert shown == {"shop": "1"}
            scraped = await api(http, base, "query", query="hostaffinity_workloads_exposed")
            assert {s["metric"]["job"] for s in scraped["result"]} == {"descheduler"}
