"""Every shipped alert reads series that exist in the variant that ships it, kustomize's and the
chart's alike: an alert on something the variant does not run would never fire (or, written
with `absent()`, fire for ever, as the NATS servers' alert did with external-nats).

A series exists when a workload of the variant serves it and a PodMonitor scrapes that
workload: `up{job="<name>"}` for each scraped workload, and each `hostaffinity_*` metric for the
workloads whose service registers its instrument (found in the service's source; the runtime's
instruments, in libs/runtime, every service serves). The instrument's name is the metric's
prefix: the Prometheus exporter adds the unit and `_total`, `_bucket` and the like.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from scripts.manifests import render
from tests.platform.helm_chart import render_chart, values_file

ROOT = Path(__file__).resolve().parents[2]
INSTRUMENT = re.compile(r'"(hostaffinity_[a-z0-9_]+)"')
SERIES = re.compile(r"\b(hostaffinity_[a-z0-9_]+|up)\b(?:\{([^}]*)\})?")
EVERY_SERVICE = "every service"
# kustomize variants, components in docs/install.md's order (monitoring first).
KUSTOMIZE: dict[str, tuple[str, ...]] = {
    "monitoring": ("monitoring",),
    "+ admission-policy": ("monitoring", "admission-policy"),
    "+ cluster-wide": ("monitoring", "cluster-wide"),
    "+ scheduler-extender": ("monitoring", "scheduler-extender"),
    "+ cert-manager": ("monitoring", "cert-manager"),
    "+ external-nats": ("monitoring", "external-nats"),
    "+ all": ("monitoring", "admission-policy", "scheduler-extender", "external-nats"),
}
# The chart: monitoring on, with each ci/ values file, and with those that go together.
HELM = ["base", "admission-policy", "cluster-wide", "scheduler-extender", "cert-manager",
        "external-nats"]  # fmt: skip
TOGETHER = ["admission-policy", "scheduler-extender", "external-nats"]


def instruments() -> dict[str, str]:
    """Each instrument name -> the service (its folder) that registers it, or EVERY_SERVICE."""
    found: dict[str, str] = {}
    for source in sorted((ROOT / "services").glob("*/src/**/*.py")):
        service = source.relative_to(ROOT / "services").parts[0]
        for name in INSTRUMENT.findall(source.read_text(encoding="utf-8")):
            found[name] = service
    for source in sorted((ROOT / "libs" / "runtime" / "src").glob("**/*.py")):
        for name in INSTRUMENT.findall(source.read_text(encoding="utf-8")):
            found[name] = EVERY_SERVICE
    return found


def producer(metric: str) -> str:
    """The service serving `metric` (the longest instrument name it starts with)."""
    known = instruments()
    prefixes = [name for name in known if metric == name or metric.startswith(name + "_")]
    assert prefixes, f"{metric}: no service registers it"
    return known[max(prefixes, key=len)]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


def scraped_jobs(documents: list[dict[str, Any]]) -> dict[str, bool]:
    """Each scraped workload's job (its `app.kubernetes.io/name`) -> whether it is one of our
    services (a Deployment running a hostaffinity image)."""
    jobs = {}
    workloads = [d for d in documents if d["kind"] in ("Deployment", "StatefulSet")]
    for monitor in (d for d in documents if d["kind"] == "PodMonitor"):
        for workload in workloads:
            labels = workload["spec"]["template"]["metadata"]["labels"]
            if _selects(monitor["spec"]["selector"], labels):
                images = [c["image"] for c in workload["spec"]["template"]["spec"]["containers"]]
                ours = any(i.startswith("ghcr.io/hostaffinity/") for i in images)
                jobs[labels[monitor["spec"]["jobLabel"]]] = ours
    return jobs


def alerts_without_series(documents: list[dict[str, Any]]) -> list[str]:
    """`<alert>: <series>` for each series an alert reads that the variant does not serve."""
    jobs = scraped_jobs(documents)
    services = {job for job, ours in jobs.items() if ours}
    missing = []
    for rule in (d for d in documents if d["kind"] == "PrometheusRule"):
        for alert in (r for group in rule["spec"]["groups"] for r in group["rules"]):
            for metric, matchers in SERIES.findall(alert["expr"]):
                if metric == "up":  # job="x", or job=~"x|y": one of them served
                    job = re.search(r'job=~?"([^"]+)"', matchers)
                    assert job, f"{alert['alert']}: up without a job"
                    served = bool(set(job[1].split("|")) & set(jobs))
                else:
                    by = producer(metric)
                    served = bool(services) if by == EVERY_SERVICE else by in services
                if not served:
                    missing.append(f"{alert['alert']}: {metric}{{{matchers}}}")
    return missing


def chart_with_monitoring(*variants: str) -> list[dict[str, Any]]:
    values: dict[str, Any] = {"monitoring": {"enabled": True}}
    for variant in variants:
        for key, section in values_file(variant).items():
            values[key] = {**values.get(key, {}), **section}
    return render_chart(values)


@pytest.mark.parametrize("variant", sorted(KUSTOMIZE))
def test_every_alert_of_a_kustomize_variant_has_its_series(variant: str) -> None:
    documents = render(*KUSTOMIZE[variant])
    assert any(d["kind"] == "PrometheusRule" for d in documents)
    assert alerts_without_series(documents) == []


@pytest.mark.parametrize("variant", [*HELM, "all"])
def test_every_alert_of_a_chart_variant_has_its_series(variant: str) -> None:
    documents = chart_with_monitoring(*(TOGETHER if variant == "all" else [variant]))
    assert alerts_without_series(documents) == []


def test_external_nats_ships_no_nats_alert() -> None:
    for documents in (
        render("monitoring", "external-nats"),
        chart_with_monitoring("external-nats"),
    ):
        (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
        expressions = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
        assert not [e for e in expressions if 'job="nats"' in e]


def test_an_alert_on_what_the_variant_does_not_run_is_found() -> None:
    """The check itself: the NATS servers' alert with the NATS servers taken out."""
    documents = render("monitoring")
    kept = [d for d in documents if (d["kind"], d["metadata"]["name"]) != ("StatefulSet", "nats")]
    assert alerts_without_series(kept) == ['HostaffinityNatsServersMissing: up{job="nats"}'] * 2
