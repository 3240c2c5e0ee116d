"""The fleet exposure gauges' values: this install's replicas that share a host with another of
their workload, or of their fleet group in any cluster (worked out from the mirror's entries)."""

from __future__ import annotations

from pathlib import Path

import msgspec
from prometheus_client import REGISTRY, generate_latest

from hostaffinity.descheduler.fleet_exposure import FleetExposure
from hostaffinity.runtime.process.telemetry import setup_telemetry
from hostaffinity.schema import ReplicaPlacement, WorkloadPlacement, fleet_key, workload_key

REPO = Path(__file__).resolve().parents[3]


def entry(cluster: str, name: str, hosts: list[str], group: str = "") -> tuple[str, bytes]:
    value = WorkloadPlacement(
        cluster=cluster,
        namespace="shop",
        kind="Deployment",
        name=name,
        fleet_group=group,
        replicas=[
            ReplicaPlacement(pod=f"{name}-{i}", host_id=host, host_name=host)
            for i, host in enumerate(hosts)
        ],
    )
    return fleet_key(cluster, workload_key("shop", "Deployment", name)), msgspec.json.encode(value)


def test_only_this_install_s_replicas_are_counted() -> None:
    gauge = FleetExposure("a")
    gauge.entries = dict(
        [
            entry("a", "web", ["esx-1", "esx-1", "esx-2"]),  # two of a's replicas together
            entry("a", "db", ["esx-3"], group="payments"),
            entry("b", "db", ["esx-3"], group="payments"),  # b's replica joins a's on esx-3
            entry("b", "api", ["esx-4", "esx-4"]),  # b's own: not a's exposure
        ]
    )
    gauge.recompute()
    assert gauge.exposed == {"workload": 2, "fleet-group": 1}
    gauge.entries.pop(fleet_key("b", workload_key("shop", "Deployment", "db")))
    gauge.recompute()
    assert gauge.exposed == {"workload": 2, "fleet-group": 0}


def test_the_gauges_are_served_under_the_names_the_alerts_read() -> None:
    """The exporter appends a gauge's unit to its name: the view's age was served as
    `..._seconds_since_contact_seconds` while the alert read `..._seconds_since_contact`."""
    setup_telemetry("hostaffinity-tests")
    gauge = FleetExposure("a")
    gauge.since_contact = 12.0
    exposition = generate_latest(REGISTRY).decode()
    served = {
        line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line[:1] != "#"
    }
    rules = (REPO / "k8s/components/monitoring/prometheusrule.yaml").read_text(encoding="utf-8")
    for name in (
        "hostaffinity_fleet_view_since_contact_seconds",
        "hostaffinity_fleet_exposed_replicas",
    ):
        assert name in served, sorted(n for n in served if "fleet" in n)
        assert name in rules
