"""k8s/ and compose.yaml: valid Kubernetes objects, and settings the config loader accepts.

The kustomize components (k8s/components) are rendered onto the base the way kustomize does it
for the two patch forms they use (RFC 6902 patches on a target, `$patch: delete`), and the result
is held to the same checks.
"""

import copy
import itertools
import tomllib
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.policy import load_policy
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.runtime.config import ServiceSettings, Settings, env_names, load_config
from hostaffinity.scheduler_extender.certificates import service_hostnames
from hostaffinity.scheduler_extender.config import SchedulerExtenderSettings
from hostaffinity.schema import POD_PHYSICAL_ANTI_AFFINITY, POD_SPREAD_ACROSS_HOSTS

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES_VERSION = "1.34.0"  # newest schema kubernetes-validate ships; our target is v1.36
NOT_KUBERNETES_OBJECTS = {"kustomization.yaml"}
PATCH_SUFFIX = ".patch.yaml"
# Served as v1 from Kubernetes v1.36, which kubernetes-validate does not ship yet; the v1beta1
# schema of 1.34 has the same shape (KEP-3962 graduated it unchanged).
NEWER_THAN_SCHEMAS = {
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "v1beta1",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "v1beta1",
}
# Custom resources of cert-manager: no schema here; test_cert_manager_component checks them.
CUSTOM_GROUPS = {"cert-manager.io"}
COMPONENTS = sorted(p.name for p in (ROOT / "k8s" / "components").iterdir() if p.is_dir())
# The config record each service loads, by its compose service and Deployment name.
SERVICE_CONFIGS: dict[str, type[Settings]] = {
    "node-labeller": NodeLabellerConfig,
    "drs-translator": DrsTranslatorConfig,
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
        if path.name in NOT_KUBERNETES_OBJECTS or path.name.endswith(PATCH_SUFFIX):
            continue
        for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if document:
                documents.append((f"{path.relative_to(ROOT)}#{index}", document))
    return documents


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


def validate(document: dict[str, Any]) -> None:
    version = NEWER_THAN_SCHEMAS.get((document["apiVersion"], document["kind"]))
    if version is not None:
        group = document["apiVersion"].rpartition("/")[0]
        document = {**document, "apiVersion": f"{group}/{version}"}
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def is_custom(document: dict[str, Any]) -> bool:
    return document["apiVersion"].partition("/")[0] in CUSTOM_GROUPS


@pytest.mark.parametrize(
    ("where", "document"),
    [(w, d) for w, d in manifest_documents() if not is_custom(d)],
    ids=lambda v: str(v)[:60],
)
def test_every_manifest_is_a_valid_kubernetes_object(where: str, document: dict[str, Any]) -> None:
    validate(document)


def test_every_kustomization_lists_existing_files() -> None:
    for kustomization in (ROOT / "k8s").rglob("kustomization.yaml"):
        loaded = yaml.safe_load(kustomization.read_text(encoding="utf-8"))
        listed = loaded.get("resources", []) + [p["path"] for p in loaded.get("patches", [])]
        missing = [name for name in listed if not (kustomization.parent / name).exists()]
        assert not missing, f"{kustomization}: {missing}"


def _load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _matches(document: dict[str, Any], target: dict[str, str]) -> bool:
    return all(
        (document["kind"] if key == "kind" else document["metadata"].get(key)) == value
        for key, value in target.items()
    )


def render(component: str | None = None) -> list[dict[str, Any]]:
    """k8s/base, with the component's resources added and its patches applied."""
    base = ROOT / "k8s" / "base"
    base_kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    documents = [d for name in base_kustomization["resources"] for d in _load_all(base / name)]
    for document in documents:
        document["metadata"].setdefault("namespace", base_kustomization["namespace"])
    if component is None:
        return documents
    where = ROOT / "k8s" / "components" / component
    kustomization = yaml.safe_load((where / "kustomization.yaml").read_text())
    documents += [d for name in kustomization.get("resources", []) for d in _load_all(where / name)]
    for patch in kustomization.get("patches", []):
        content = yaml.safe_load((where / patch["path"]).read_text())
        if isinstance(content, dict) and content.get("$patch") == "delete":
            target = {"kind": content["kind"], "name": content["metadata"]["name"]}
            doomed = [d for d in documents if _matches(d, target)]
            assert doomed, f"{component}: {patch['path']} deletes nothing"
            documents = [d for d in documents if not _matches(d, target)]
            continue
        targets = [d for d in documents if _matches(d, patch["target"])]
        assert targets, f"{component}: {patch['path']} matches no object"
        for document in targets:
            patched = jsonpatch.apply_patch(document, content)
            document.clear()
            document.update(patched)
    return documents


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return found


def extender_settings(documents: list[dict[str, Any]], tmp_path: Path) -> SchedulerExtenderSettings:
    """What the rendered scheduler-extender Deployment would load: its --config files and env."""
    deployment = one(documents, "Deployment", "scheduler-extender")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    files = {
        k: v for d in documents if d["kind"] == "ConfigMap" for k, v in d.get("data", {}).items()
    }
    paths = []
    for flag, value in itertools.pairwise(container.get("args", [])):
        if flag == "--config":
            paths.append(tmp_path / Path(value).name)
            paths[-1].write_text(files[Path(value).name], encoding="utf-8")
    environ = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    return load_config(SchedulerExtenderSettings, paths, environ=environ)


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_renders_onto_the_base_and_stays_valid(component: str, tmp_path: Path) -> None:
    documents = render(component)
    for document in documents:
        if not is_custom(document):
            validate(copy.deepcopy(document))
    extender_settings(documents, tmp_path)


def test_webhook_configuration_as_shipped(tmp_path: Path) -> None:
    """The knobs the issue fixes, and that the pieces name one another consistently."""
    documents = render()
    settings = extender_settings(documents, tmp_path)
    configuration = one(documents, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["name"] == settings.webhook.configuration_name
    (webhook,) = configuration["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["timeoutSeconds"] == 2
    assert webhook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["pods"], "scope": "Namespaced"}
    ]  # fmt: skip
    (excluded,) = webhook["namespaceSelector"]["matchExpressions"]
    assert excluded["operator"] == "NotIn"
    assert set(excluded["values"]) == {"kube-system", settings.kubernetes.namespace}
    (condition,) = webhook["matchConditions"]
    assert POD_PHYSICAL_ANTI_AFFINITY in condition["expression"]
    assert POD_SPREAD_ACROSS_HOSTS in condition["expression"]
    # The Service port the webhook names reaches the container port the service listens on.
    service = one(documents, "Service", webhook["clientConfig"]["service"]["name"])
    assert webhook["clientConfig"]["service"]["name"] == settings.webhook.service_name
    (port,) = [
        p
        for p in service["spec"]["ports"]
        if p["port"] == webhook["clientConfig"]["service"]["port"]
    ]
    container = one(documents, "Deployment", "scheduler-extender")["spec"]["template"]["spec"][
        "containers"
    ][0]
    (listening,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert listening["containerPort"] == settings.webhook.port
    # RBAC: patch this configuration only, and keep the serving certificate in its Secret.
    role = one(documents, "ClusterRole", "hostaffinity-scheduler-extender")
    (own,) = [r for r in role["rules"] if "mutatingwebhookconfigurations" in r["resources"]]
    assert own["resourceNames"] == [configuration["metadata"]["name"]]
    assert set(own["verbs"]) == {"get", "patch"}
    tls_role = one(documents, "Role", "hostaffinity-scheduler-extender-webhook-tls")
    named = [r for r in tls_role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == [settings.webhook.secret_name]


def test_admission_policy_component_replaces_the_webhook(tmp_path: Path) -> None:
    documents = render("admission-policy")
    assert not [d for d in documents if d["kind"] == "MutatingWebhookConfiguration"]
    assert not extender_settings(documents, tmp_path).webhook.enabled
    policy = one(documents, "MutatingAdmissionPolicy")
    binding = one(documents, "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy["spec"]["failurePolicy"] == "Ignore"
    shipped = one(render(), "MutatingWebhookConfiguration")["webhooks"][0]
    assert policy["spec"]["matchConditions"] == shipped["matchConditions"]
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == shipped["namespaceSelector"]
    assert [m["patchType"] for m in policy["spec"]["mutations"]] == ["JSONPatch"] * 4


def test_cert_manager_component_serves_the_certificate_it_injects(tmp_path: Path) -> None:
    documents = render("cert-manager")
    settings = extender_settings(documents, tmp_path)
    assert settings.webhook.certificates == "files"
    configuration = one(documents, "MutatingWebhookConfiguration")
    certificate = one(documents, "Certificate")
    issuer = one(documents, "Issuer")
    injected = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert injected == f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    service = configuration["webhooks"][0]["clientConfig"]["service"]
    names = service_hostnames(service["name"], service["namespace"])
    assert set(certificate["spec"]["dnsNames"]) <= set(names)
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    pod = one(documents, "Deployment", "scheduler-extender")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret")]
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert settings.webhook.tls_cert_file == f"{mount['mountPath']}/tls.crt"
    assert settings.webhook.tls_key_file == f"{mount['mountPath']}/tls.key"


def test_cluster_wide_component_sends_every_pod() -> None:
    webhook = one(render("cluster-wide"), "MutatingWebhookConfiguration")["webhooks"][0]
    assert "matchConditions" not in webhook


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


def test_compose_publishes_each_host_port_once() -> None:
    """Two services on one host port and `docker compose up` fails for the second."""
    published = [
        str(port).split(":")[0]
        for service in compose()["services"].values()
        for port in service.get("ports", [])
    ]
    assert sorted(published) == sorted(set(published))


def test_compose_builds_name_a_service_the_dockerfile_can_build() -> None:
    """The root Dockerfile installs hostaffinity-$SERVICE from services/$SERVICE."""
    assert (ROOT / "Dockerfile").is_file()
    builds = {name: s["build"] for name, s in compose()["services"].items() if "build" in s}
    assert set(SERVICE_CONFIGS) <= set(builds)
    for name, build in builds.items():
        assert build["context"] == ".", name
        assert "dockerfile" not in build, name
        service = build["args"]["SERVICE"]
        project = tomllib.loads((ROOT / "services" / service / "pyproject.toml").read_text())
        assert project["project"]["name"] == f"hostaffinity-{service}", name
        assert f"hostaffinity-{service}" in project["project"]["scripts"], name


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
