"""charts/hostaffinity rendered by Helm's own engine (helm-python-sdk: Helm v4's Go SDK).

Each values file of charts/hostaffinity/ci/ stands for one k8s/ variant: `base-values.yaml` for
k8s/base, `<component>-values.yaml` for k8s/base plus that component. `render_variant` gives
what `helm template` prints for it, parsed, so the manifest checks run on both renderings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from scripts.manifests import ROOT

NAMESPACE = "hostaffinity"  # the base's

# Helm logs (at INFO) each of the chart's files/ links into k8s/ on every load: not news here.
helm.disable_logging()
CHART = ROOT / "charts" / "hostaffinity"
RELEASE = "hostaffinity"
# values file under ci/ -> the k8s/ component it stands for (None: k8s/base alone).
VARIANTS: dict[str, str | None] = {
    path.name.removesuffix("-values.yaml"): (
        None if path.name == "base-values.yaml" else path.name.removesuffix("-values.yaml")
    )
    for path in sorted((CHART / "ci").glob("*-values.yaml"))
}


def values_file(variant: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / f"{variant}-values.yaml").read_text())
    return loaded


def render_chart(
    values: dict[str, Any] | None = None,
    chart: Path = CHART,
    namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """The chart's objects as `helm template` prints them, for this release."""
    return [
        document
        for path, text in sorted(_rendered(values, chart, namespace).items())
        if not path.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


def render_notes(values: dict[str, Any] | None = None) -> str:
    """What `helm install` prints after installing the release (templates/NOTES.txt)."""
    (notes,) = [
        t for p, t in _rendered(values, CHART, NAMESPACE).items() if p.endswith("NOTES.txt")
    ]
    return notes


def _rendered(values: dict[str, Any] | None, chart: Path, namespace: str) -> dict[str, str]:
    """Every template's output, by its path in the chart."""
    rendered: dict[str, str] = helm.Chart.load(chart).render(
        values or {}, name=RELEASE, namespace=namespace, is_install=True
    )
    return rendered


def render_variant(*components: str | None) -> list[dict[str, Any]]:
    """The chart with the values of one k8s/ variant: k8s/base plus at most one component
    (the scheduler-extender may come with another: its values are merged in)."""
    wanted = [c for c in dict.fromkeys(components) if c is not None]
    values: dict[str, Any] = values_file("base")
    for component in wanted:
        for key, section in values_file(component).items():
            values[key] = {**values.get(key, {}), **section}
    return render_chart(values)
