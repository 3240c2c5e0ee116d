"""k8s/base with k8s/components rendered onto it, as `kustomize build` does for what they use.

The release (scripts/release.py) renders through this module, not kustomize, to keep the NATS
config's name without kustomize's content hash (see below); the manifest tests
(tests/test_deploy_manifests.py) render the same way. It covers exactly the
features k8s/ uses: `resources`, the kustomization's `namespace` on objects that have none,
`configMapGenerator` in its `files` form with `options.labels`, and a component's `patches` in
the two forms they are written in (an RFC 6902 list on a `target` of kind, group and name, which
changes nothing when it matches nothing, as in kustomize; and `$patch: delete`). The install
pages' overlays are built by the real kustomize (`kubectl kustomize`, tests/platform/kubectl.py);
this module renders what `make release` ships and what the manifest tests hold to the chart.

Where it differs from kustomize: a generated ConfigMap keeps the name as written (kustomize
appends a hash of the content to the name and to every reference, so a change of content rolls
the pods that mount it; here a changed nats config needs a `kubectl rollout restart`), and
anything k8s/ does not use is not implemented and is refused (`KeyError`/`ValueError`), so a
new feature fails the tests instead of being silently dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonpatch
import yaml

ROOT = Path(__file__).resolve().parents[1]
SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator", "patches"}
# kustomize's default output order (api/resid/gvk.go, orderFirst and orderLast): what others
# refer to is applied first, the webhooks that would intercept the rest last.
ORDER_FIRST = (
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
    "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
    "ConfigMap", "Secret", "Endpoints", "Service", "LimitRange", "PriorityClass",
    "PersistentVolume", "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob",
    "PodDisruptionBudget",
)  # fmt: skip
ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# Kinds k8s/ ships that are cluster-scoped: the kustomization's namespace is not set on them.
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding", "CustomResourceDefinition", "PriorityClass",
}  # fmt: skip


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _kustomization(where: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((where / "kustomization.yaml").read_text())
    if unsupported := set(loaded) - SUPPORTED:
        raise ValueError(f"{where}/kustomization.yaml: not rendered here: {sorted(unsupported)}")
    return loaded


def matches(document: dict[str, Any], target: dict[str, str]) -> bool:
    """kustomize's patch target: kind, group and the metadata fields it names."""

    def field(key: str) -> Any:
        if key == "kind":
            return document["kind"]
        if key == "group":
            return document["apiVersion"].rpartition("/")[0]
        return document["metadata"].get(key)

    return all(field(key) == value for key, value in target.items())


def generated_configmaps(where: Path, kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    """The ConfigMaps of a kustomization's configMapGenerator, in the `files` form it uses."""
    documents = []
    for generator in kustomization.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for entry in generator["files"]:
            key, _, path = entry.rpartition("=")
            data[key or Path(path).name] = (where / path).read_text(encoding="utf-8")
        metadata: dict[str, Any] = {"name": generator["name"]}
        if labels := generator.get("options", {}).get("labels"):
            metadata["labels"] = labels
        documents.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        )
    return documents


def render(*components: str | None, k8s: Path = ROOT / "k8s") -> list[dict[str, Any]]:
    """k8s/base, with each component's resources added and its patches applied, in order
    (`k8s`: another copy of the folder, e.g. one a test changed)."""
    base_dir = k8s / "base"
    base = _kustomization(base_dir)
    documents = [d for name in base["resources"] for d in load_all(base_dir / name)]
    documents += generated_configmaps(base_dir, base)
    for component in dict.fromkeys(c for c in components if c is not None):
        documents = _with_component(documents, k8s / "components" / component)
    for document in documents:
        if document["kind"] not in CLUSTER_SCOPED:
            document["metadata"].setdefault("namespace", base["namespace"])
    return documents


def _with_component(documents: list[dict[str, Any]], where: Path) -> list[dict[str, Any]]:
    component = where.name
    kustomization = _kustomization(where)
    documents += [d for name in kustomization.get("resources", []) for d in load_all(where / name)]
    documents += generated_configmaps(where, kustomization)
    for patch in kustomization.get("patches", []):
        content = yaml.safe_load((where / patch["path"]).read_text())
        if isinstance(content, dict) and content.get("$patch") == "delete":
            target = {"kind": content["kind"], "name": content["metadata"]["name"]}
            if not any(matches(d, target) for d in documents):
                raise ValueError(f"{component}: {patch['path']} deletes nothing")
            documents = [d for d in documents if not matches(d, target)]
            continue
        # A patch whose target matches nothing changes nothing, as in kustomize (external-nats
        # takes the NATS alert out of monitoring's PrometheusRule only when there is one).
        for document in (d for d in documents if matches(d, patch["target"])):
            patched = jsonpatch.apply_patch(document, content)
            document.clear()
            document.update(patched)
    return documents


def kustomize_order(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents in the order `kustomize build` prints them (stable within a kind)."""

    def rank(document: dict[str, Any]) -> int:
        kind = document["kind"]
        if kind in ORDER_FIRST:
            return ORDER_FIRST.index(kind)
        if kind in ORDER_LAST:
            return len(ORDER_FIRST) + 1 + ORDER_LAST.index(kind)
        return len(ORDER_FIRST)

    return sorted(documents, key=rank)
