"""k8s/ rendered as `kubectl kustomize` renders it, for the forms our kustomizations use.

No kustomize binary can be installed here, so the base's resources, its configMapGenerator (the
NATS servers' config files, under the name as written: kustomize appends a hash of the content to
the name and to every reference to it) and each component's resources and patches (RFC 6902
patches on a target, `$patch: delete`) are applied in kustomize's order. The manifest tests and
the Helm chart's agreement test both read k8s/ through this one renderer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonpatch
import yaml

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "hostaffinity"
# Kinds kustomize leaves without a namespace (its namespace transformer skips cluster-scoped
# objects: api/filters/namespace in kubernetes-sigs/kustomize).
CLUSTER_SCOPED = frozenset({
    "Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition",
    "PriorityClass", "StorageClass",
})  # fmt: skip


def load_all(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file."""
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _matches(document: dict[str, Any], target: dict[str, str]) -> bool:
    return all(
        (document["kind"] if key == "kind" else document["metadata"].get(key)) == value
        for key, value in target.items()
    )


def generated_configmaps(where: Path, kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    """The ConfigMaps of a kustomization's configMapGenerator, in the `files` form it uses."""
    documents = []
    for generator in kustomization.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for entry in generator.get("files", []):
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
    """k8s/base, with each component's resources added and its patches applied, in order."""
    base = k8s / "base"
    base_kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    documents = [d for name in base_kustomization["resources"] for d in load_all(base / name)]
    documents += generated_configmaps(base, base_kustomization)
    _set_namespace(documents, base_kustomization["namespace"])
    for component in dict.fromkeys(c for c in components if c is not None):
        documents = _with_component(documents, k8s / "components" / component)
    return documents


def _set_namespace(documents: list[dict[str, Any]], namespace: str) -> None:
    for document in documents:
        if document["kind"] not in CLUSTER_SCOPED:
            document["metadata"].setdefault("namespace", namespace)


def _with_component(documents: list[dict[str, Any]], where: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((where / "kustomization.yaml").read_text())
    documents += [d for name in kustomization.get("resources", []) for d in load_all(where / name)]
    documents += generated_configmaps(where, kustomization)
    _set_namespace(documents, NAMESPACE)
    for patch in kustomization.get("patches", []):
        content = yaml.safe_load((where / patch["path"]).read_text())
        if isinstance(content, dict) and content.get("$patch") == "delete":
            target = {"kind": content["kind"], "name": content["metadata"]["name"]}
            doomed = [d for d in documents if _matches(d, target)]
            assert doomed, f"{where.name}: {patch['path']} deletes nothing"
            documents = [d for d in documents if not _matches(d, target)]
            continue
        targets = [d for d in documents if _matches(d, patch["target"])]
        assert targets, f"{where.name}: {patch['path']} matches no object"
        for document in targets:
            patched = jsonpatch.apply_patch(document, content)
            document.clear()
            document.update(patched)
    return documents
