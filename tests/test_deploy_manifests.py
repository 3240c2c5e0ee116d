"""k8s/ and compose.yaml: valid Kubernetes objects, and settings the config loader accepts."""

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hostaffinity.runtime.config import ServiceSettings, env_names, load_config

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES_VERSION = "1.34.0"  # newest schema kubernetes-validate ships; our target is v1.36
NOT_KUBERNETES_OBJECTS = {"kustomization.yaml"}


def manifest_documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted((ROOT / "k8s").rglob("*.yaml")):
        if path.name in NOT_KUBERNETES_OBJECTS:
            continue
        for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if document:
                documents.append((f"{path.relative_to(ROOT)}#{index}", document))
    return documents


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize(("where", "document"), manifest_documents(), ids=lambda v: str(v)[:60])
def test_every_manifest_is_a_valid_kubernetes_object(where: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_every_kustomization_lists_existing_files() -> None:
    for kustomization in (ROOT / "k8s").rglob("kustomization.yaml"):
        listed = yaml.safe_load(kustomization.read_text(encoding="utf-8"))["resources"]
        missing = [name for name in listed if not (kustomization.parent / name).exists()]
        assert not missing, f"{kustomization}: {missing}"


def test_shared_configmap_loads_with_the_strict_config_loader(tmp_path: Path) -> None:
    configmaps = [doc for _, doc in manifest_documents() if doc["kind"] == "ConfigMap"]
    shared = next(cm for cm in configmaps if cm["metadata"]["name"] == "hostaffinity-config")
    path = tmp_path / "shared.yaml"
    path.write_text(shared["data"]["shared.yaml"], encoding="utf-8")
    config = load_config(ServiceSettings, [path], environ={})
    assert config.shared.physical_anti_affinity == "opt-in"


def test_compose_services_have_images_and_healthchecks() -> None:
    services = compose()["services"]
    assert {"nats", "vcsim", "k3s"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        # vmware/vcsim is a FROM-scratch image: no command can run in it to check health.
        if name != "vcsim":
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_compose_environment_names_are_accepted_by_the_config_loader() -> None:
    document = compose()
    accepted = env_names(ServiceSettings)
    environments = [document["x-hostaffinity-env"]]
    environments += [s.get("environment", {}) for s in document["services"].values()]
    for environment in environments:
        ours = {name for name in environment if name.startswith("HOSTAFFINITY_")}
        assert ours <= accepted, ours - accepted
        load_config(ServiceSettings, environ={n: str(environment[n]) for n in ours})
