"""k8s/ and compose.yaml: valid Kubernetes objects, and settings the config loader accepts."""

import itertools
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.policy import load_policy
from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.runtime.config import ServiceSettings, Settings, env_names, load_config
from hostaffinity.scheduler_extender.config import SchedulerExtenderSettings

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES_VERSION = "1.34.0"  # newest schema kubernetes-validate ships; our target is v1.36
NOT_KUBERNETES_OBJECTS = {"kustomization.yaml"}
# The config record each service loads, by its compose service and Deployment name.
SERVICE_CONFIGS: dict[str, type[Settings]] = {
    "node-labeller": NodeLabellerConfig,
    "scheduler-extender": SchedulerExtenderSettings,
    "descheduler": DeschedulerConfig,
}
# Values for settings that have no default, as the Secret would provide them.
REQUIRED_SAMPLES = {
    "HOSTAFFINITY_VCENTER__HOST": "vcenter.example.com",
    "HOSTAFFINITY_VCENTER__USERNAME": "svc-hostaffinity",
    "HOSTAFFINITY_VCENTER__PASSWORD": "secret",
}


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
    assert {"nats", "vcsim", "k3s", *SERVICE_CONFIGS} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        one_shot = service.get("restart") == "no"
        # vmware/vcsim is a FROM-scratch image: no command can run in it to check health.
        if name != "vcsim" and not one_shot:
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


@pytest.mark.parametrize("service", sorted(SERVICE_CONFIGS))
def test_compose_environment_is_accepted_by_the_service_config(service: str) -> None:
    record = SERVICE_CONFIGS[service]
    environment = {k: str(v) for k, v in compose()["services"][service]["environment"].items()}
    ours = {name for name in environment if name.startswith("HOSTAFFINITY_")}
    assert ours <= env_names(record), ours - env_names(record)
    load_config(record, environ={name: environment[name] for name in ours})


@pytest.mark.parametrize("service", sorted(SERVICE_CONFIGS))
def test_deployment_config_files_and_env_load_with_the_service_config(
    service: str, tmp_path: Path
) -> None:
    """The Deployment's --config files (from ConfigMaps) and env load without an error."""
    documents = [doc for _, doc in manifest_documents()]
    deployment = next(
        d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == service
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    files: dict[str, str] = {}
    for doc in documents:
        if doc["kind"] == "ConfigMap":
            files.update(doc.get("data", {}))
    args = container.get("args", [])
    paths = []
    for flag, value in itertools.pairwise(args):
        if flag == "--config":
            name = Path(value).name
            assert name in files, f"{service} reads {value}, which no ConfigMap provides"
            paths.append(tmp_path / name)
            paths[-1].write_text(files[name], encoding="utf-8")
    environ = {
        env["name"]: REQUIRED_SAMPLES.get(env["name"], str(env.get("value", "sample")))
        for env in container.get("env", [])
        if env["name"].startswith("HOSTAFFINITY_")
    }
    assert set(environ) <= env_names(SERVICE_CONFIGS[service])
    load_config(SERVICE_CONFIGS[service], paths, environ=environ)


def test_descheduler_policy_in_the_configmap_loads(tmp_path: Path) -> None:
    configmap = next(
        doc
        for _, doc in manifest_documents()
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "hostaffinity-descheduler"
    )
    path = tmp_path / "descheduler-policy.yaml"
    path.write_text(configmap["data"]["descheduler-policy.yaml"], encoding="utf-8")
    policy = load_policy(path)
    assert policy.limits.total == 100
    assert [s.name for s in policy.profiles[0].strategies][-1] == "RemoveDuplicates"
