"""What the monitoring tests share: the shipped rules and dashboard, and Debian's Prometheus tools.

The tools come from Debian's `prometheus` package (scripts/install-prometheus.sh, run by
`make setup`); a test that needs one fails, never skips, when it is missing, so a machine without
them cannot pass the rule tests by not running them.
"""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "k8s" / "components" / "monitoring"
RULES_TEST = Path(__file__).with_name("rules_test.yaml")
OPERATING = ROOT / "docs" / "operating.md"


def tool(name: str) -> str:
    """The path of `promtool` or `prometheus`; fails the test loudly when it is not installed."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: run `make setup` (Debian's prometheus package)")
    return found


EXTENDER_ALERTS = ROOT / "k8s" / "components" / "scheduler-extender" / "alerts.patch.yaml"


def rule_groups() -> dict[str, Any]:
    """Every shipped alert as one Prometheus rule file (`groups:`): the PrometheusRule's spec,
    and the extender's group that k8s/components/scheduler-extender adds to it."""
    rule = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text(encoding="utf-8"))
    spec: dict[str, Any] = rule["spec"]
    added = yaml.safe_load(EXTENDER_ALERTS.read_text(encoding="utf-8"))
    spec["groups"] += [op["value"] for op in added if op["op"] == "add"]
    return spec


def alerts() -> list[dict[str, Any]]:
    return [r for group in rule_groups()["groups"] for r in group["rules"] if "alert" in r]


def write_rules(directory: Path) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups()), encoding="utf-8")
    return path


def dashboard_panels() -> list[dict[str, Any]]:
    text = (COMPONENT / "dashboards" / "hostaffinity.json").read_text(encoding="utf-8")
    panels: list[dict[str, Any]] = json.loads(text)["panels"]
    return panels


def pod_monitors() -> dict[str, dict[str, Any]]:
    """The shipped PodMonitors, by name (each named after the workload it scrapes)."""
    text = (COMPONENT / "podmonitors.yaml").read_text(encoding="utf-8")
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}


def scrape_config(job: str, port: int, namespace: str) -> dict[str, Any]:
    """What the Prometheus operator makes of the PodMonitor named `job` for one pod on `port`:
    the target labelled with the pod's namespace and name, and the endpoint's honorLabels
    (prometheus-operator pkg/prometheus/promcfg.go, generatePodMonitorConfig: `namespace` and
    `pod` from the pod's metadata, `honor_labels` from podMetricsEndpoints[].honorLabels)."""
    (endpoint,) = pod_monitors()[job]["spec"]["podMetricsEndpoints"]
    return {
        "job_name": job,
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "static_configs": [
            {
                "targets": [f"127.0.0.1:{port}"],
                "labels": {"namespace": namespace, "pod": f"{job}-0"},
            }
        ],
    }
