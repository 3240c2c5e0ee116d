"""charts/hostaffinity, through Helm's own engine (helm-python-sdk binds Helm v4's Go SDK).

One truth: the chart rendered with each values file of charts/hostaffinity/ci/ gives the objects
k8s/ gives for the same variant (k8s/base, or k8s/base plus one component), compared as parsed
objects. The only differences allowed are those Helm itself brings, listed in `helm_only`:
Helm's labels, the hook annotations of the bus's two Jobs (instead of the Argo CD and Flux
annotations that make GitOps tools replace k8s/'s Jobs on an upgrade), and the
checksum annotation that rolls the NATS servers when their config changes (kustomize's hashed
ConfigMap name does that on the k8s/ side). A change to one side alone fails
`test_the_chart_renders_what_k8s_ships`; the two tests after it show that it does.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from scripts.manifests import ROOT, render
from tests.platform.helm_chart import CHART, NAMESPACE, VARIANTS, render_chart, values_file

HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
GITOPS_ANNOTATIONS = ("argocd.argoproj.io/sync-options", "kustomize.toolkit.fluxcd.io/force")
HOOK_ANNOTATIONS = ("helm.sh/hook", "helm.sh/hook-weight", "helm.sh/hook-delete-policy")
Key = tuple[str, str]


def _without(mapping: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        mapping.pop(key, None)


def helm_only(document: dict[str, Any]) -> dict[str, Any]:
    """The object less what Helm adds by design (the module docstring lists it)."""
    document = copy.deepcopy(document)
    metadata = document["metadata"]
    _without(metadata.get("labels", {}), HELM_LABELS)
    annotations = metadata.get("annotations", {})
    _without(annotations, HOOK_ANNOTATIONS)
    if not annotations:
        metadata.pop("annotations", None)
    template = document.get("spec", {}).get("template", {}).get("metadata", {})
    _without(template.get("annotations", {}), ("checksum/config",))
    if template.get("annotations") == {}:
        template.pop("annotations")
    return document


def kustomize_only(document: dict[str, Any]) -> dict[str, Any]:
    """The object less what only kustomize's side needs: the Jobs' annotations that make Argo CD
    and Flux replace them on an upgrade (the chart's Jobs are hooks, which Helm replaces)."""
    document = copy.deepcopy(document)
    if document["kind"] == "Job":
        annotations = document["metadata"].get("annotations", {})
        _without(annotations, GITOPS_ANNOTATIONS)
        if not annotations:
            document["metadata"].pop("annotations", None)
    return document


def parsed_data(document: dict[str, Any]) -> dict[str, Any]:
    """A ConfigMap's YAML files compared parsed (comments and layout are the writer's)."""
    if document["kind"] != "ConfigMap":
        return document
    document = copy.deepcopy(document)
    document["data"] = {
        key: yaml.safe_load(text) if key.endswith(".yaml") else text
        for key, text in document.get("data", {}).items()
    }
    return document


def by_key(documents: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): parsed_data(d) for d in documents}


def differences(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> list[str]:
    """What differs between the two sides, one line per object (empty when they agree)."""
    ours = by_key([helm_only(d) for d in chart])
    theirs = by_key([kustomize_only(d) for d in kustomized])
    found = [f"only in the chart: {key}" for key in sorted(ours.keys() - theirs.keys())]
    found += [f"only in k8s/: {key}" for key in sorted(theirs.keys() - ours.keys())]
    for key in sorted(ours.keys() & theirs.keys()):
        if ours[key] != theirs[key]:
            found.append(f"{key} differs:\n--- chart\n{yaml.safe_dump(ours[key])}\n"
                         f"--- k8s/\n{yaml.safe_dump(theirs[key])}")  # fmt: skip
    return found


def without_the_namespace(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """k8s/'s objects less its Namespace, which the chart never makes: Helm keeps the release
    record in the namespace, so it exists before `helm install` (docs/install.md)."""
    return [d for d in documents if d["kind"] != "Namespace"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_chart_renders_what_k8s_ships(variant: str) -> None:
    kustomized = without_the_namespace(render(VARIANTS[variant]))
    found = differences(render_chart(values_file(variant)), kustomized)
    assert not found, "\n".join(found)


def test_every_k8s_component_has_a_values_file() -> None:
    components = {p.name for p in (ROOT / "k8s" / "components").iterdir() if p.is_dir()}
    assert components == {c for c in VARIANTS.values() if c is not None}


def test_a_change_to_k8s_alone_is_caught(tmp_path: Path) -> None:
    k8s = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", k8s)
    deployment = k8s / "base" / "node-labeller" / "deployment.yaml"
    text = deployment.read_text()
    deployment.write_text(text.replace("replicas: 2", "replicas: 3", 1))

    found = differences(render_chart(values_file("base")), without_the_namespace(render(k8s=k8s)))

    assert [line.splitlines()[0] for line in found] == ["('Deployment', 'node-labeller') differs:"]


def test_a_change_to_the_chart_alone_is_caught(tmp_path: Path) -> None:
    chart = tmp_path / "charts" / "hostaffinity"
    shutil.copytree(CHART, chart, symlinks=False)
    template = chart / "templates" / "networkpolicy.yaml"
    template.write_text(template.read_text().replace("port: 8080", "port: 8081"))

    found = differences(
        render_chart(values_file("base"), chart=chart), without_the_namespace(render())
    )

    assert [line.splitlines()[0] for line in found] == ["('NetworkPolicy', 'metrics') differs:"]


@pytest.mark.parametrize("variant", [None, *sorted(VARIANTS)])
def test_the_chart_lints_clean(variant: str | None) -> None:
    report = helm.lint(
        CHART, values_file(variant) if variant else None, strict=True, namespace=NAMESPACE
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert not problems, report
    assert not report["errors"], report


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"nodeLabeler": {"replicas": 1}}, "nodeLabeler"),
        ({"admission": {"mode": "mutating"}}, "mode"),
        ({"descheduler": {"replicas": "two"}}, "replicas"),
        ({"image": {"tag": 1}}, "tag"),
    ],
    ids=["misspelt section", "unknown mode", "replicas not a number", "tag not a string"],
)
def test_a_misspelt_or_wrong_value_fails_at_install(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmError, match=complaint):
        render_chart(values)


def test_the_defaults_are_the_base_less_its_namespace() -> None:
    """`helm install` with no values file: what k8s/base ships, the Namespace made by Helm's
    --create-namespace (or by hand) rather than owned by the release."""
    found = differences(render_chart(), render())
    assert found == ["only in k8s/: ('Namespace', 'hostaffinity')"]


def test_the_chart_never_makes_its_namespace() -> None:
    """`namespace.create: true` put the bus's pre-install hooks in a namespace made only after
    them; Helm stores the release there before any of it, so the value stops the install saying
    what to do instead."""
    with pytest.raises(
        helm.HelmError, match=r"namespace\.create is no longer a value.*kubectl create namespace"
    ):
        render_chart({"namespace": {"create": True}})


def test_the_tag_defaults_to_the_app_version_and_the_registry_is_one_value() -> None:
    app_version = helm.Chart.load(CHART).metadata["appVersion"]
    images = {
        container["image"]
        for document in render_chart({"image": {"registry": "registry.example/ha"}})
        if document["kind"] in {"Deployment", "Job"}
        for container in document["spec"]["template"]["spec"]["containers"]
    }
    assert images == {
        f"registry.example/ha/{service}:{app_version}"
        for service in ("node-labeller", "drs-translator", "admission-webhook", "descheduler")
    }


def test_a_release_in_another_namespace_names_it_everywhere() -> None:
    documents = render_chart(namespace="vsphere-ops")
    text = yaml.safe_dump_all(documents)
    shared = next(
        yaml.safe_load(d["data"]["shared.yaml"])
        for d in documents
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hostaffinity-config"
    )
    assert shared["nats"]["servers"] == ["tls://nats.vsphere-ops.svc:4222"]
    assert "namespace: hostaffinity" not in text
    webhook = next(d for d in documents if d["kind"] == "MutatingWebhookConfiguration")
    skipped = webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert skipped == ["kube-system", "vsphere-ops"]
