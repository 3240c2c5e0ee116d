"""charts/hostaffinity with several vCenters: `vcenter` is item 0, `additionalVcenters` items 1..n.

The rendered node-labeller and drs-translator are loaded as the kubelet and the services load
them (tests/platform/pod_config.py: the ConfigMap's files, the env from Secrets given as data),
so the test sees the three vCenters the services would work with, each from its own Secret.
(The default render, without additionalVcenters, is held to k8s/ by tests/test_helm_chart.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.runtime.process.config import Settings
from hostaffinity.runtime.vcenter.settings import VCenterServiceSettings
from tests.platform.helm_chart import CHART, NAMESPACE, render_chart, render_notes
from tests.platform.pod_config import (
    deployment_config,
    mounted_secret_key,
    one,
    pod_and_container,
)

KUBERNETES_VERSION = "1.34.0"  # newest schema kubernetes-validate ships
VCENTER_SERVICES: dict[str, type[Settings]] = {
    "node-labeller": NodeLabellerConfig,
    "drs-translator": DrsTranslatorConfig,
}
WEST_THUMBPRINT = "SHA256:" + ":".join(["AB"] * 32)
VALUES: dict[str, Any] = {
    "vcenter": {"name": "vc-east"},
    "additionalVcenters": [
        {"name": "vc-west", "secret": "hostaffinity-vcenter-west"},
        {"name": "vc-south", "secret": "hostaffinity-vcenter-south"},
    ],
}
# The Secrets the user made, as data: the west one pins a thumbprint, the others give ca.crt.
SECRETS = {
    "hostaffinity-vcenter": {
        "host": "vc-east.example.com", "username": "svc-east", "password": "p-east",
        "ca.crt": "-----BEGIN CERTIFICATE-----east",
    },
    "hostaffinity-vcenter-west": {
        "host": "vc-west.example.com", "username": "svc-west", "password": "p-west",
        "thumbprint": WEST_THUMBPRINT,
    },
    "hostaffinity-vcenter-south": {
        "host": "vc-south.example.com", "username": "svc-south", "password": "p-south",
        "ca.crt": "-----BEGIN CERTIFICATE-----south",
    },
}  # fmt: skip
# vCenter name -> its Secret and where its ca.crt is mounted.
EXPECTED = {
    "vc-east": ("hostaffinity-vcenter", "/var/run/hostaffinity/vcenter/ca.crt"),
    "vc-west": ("hostaffinity-vcenter-west", "/var/run/hostaffinity/vcenter-1/ca.crt"),
    "vc-south": ("hostaffinity-vcenter-south", "/var/run/hostaffinity/vcenter-2/ca.crt"),
}


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return render_chart(VALUES)


def loaded(documents: list[dict[str, Any]], service: str, tmp_path: Path) -> VCenterServiceSettings:
    config = deployment_config(documents, service, VCENTER_SERVICES[service], SECRETS, tmp_path)
    assert isinstance(config, VCenterServiceSettings)
    return config


def test_each_vcenter_is_an_item_of_both_services_lists(documents: list[dict[str, Any]]) -> None:
    data = one(documents, "ConfigMap", "hostaffinity-config")["data"]
    for service in VCENTER_SERVICES:
        assert yaml.safe_load(data[f"{service}.yaml"])["vcenters"] == [
            {"name": "vc-east"}, {"name": "vc-west"}, {"name": "vc-south"},
        ]  # fmt: skip


@pytest.mark.parametrize("service", sorted(VCENTER_SERVICES))
def test_the_service_loads_each_vcenter_from_its_own_secret(
    documents: list[dict[str, Any]], service: str, tmp_path: Path
) -> None:
    config = loaded(documents, service, tmp_path)

    assert [v.name for v in config.vcenters] == list(EXPECTED)
    for vcenter in config.vcenters:
        secret_name, ca_file = EXPECTED[vcenter.name]
        secret = SECRETS[secret_name]
        assert (vcenter.host, vcenter.username, vcenter.password) == (
            secret["host"], secret["username"], secret["password"],
        )  # fmt: skip
        assert vcenter.ca_file == ca_file
        assert vcenter.thumbprint == secret.get("thumbprint")


@pytest.mark.parametrize("service", sorted(VCENTER_SERVICES))
def test_each_ca_file_is_the_ca_of_that_vcenters_secret_alone(
    documents: list[dict[str, Any]], service: str, tmp_path: Path
) -> None:
    config = loaded(documents, service, tmp_path)
    pod, container = pod_and_container(one(documents, "Deployment", service))

    for vcenter in config.vcenters:
        assert vcenter.ca_file is not None
        secret_name, _ = EXPECTED[vcenter.name]
        # optional: a Secret that pins a thumbprint instead has no ca.crt, and the pod starts.
        assert mounted_secret_key(pod, container, vcenter.ca_file) == (secret_name, "ca.crt", True)
    vcenter_volumes = [v for v in pod["volumes"] if "secret" in v]
    assert [v["secret"]["items"] for v in vcenter_volumes] == [
        [{"key": "ca.crt", "path": "ca.crt"}]
    ] * 3
    vcenter_mounts = [m for m in container["volumeMounts"] if m["mountPath"].startswith(
        "/var/run/hostaffinity/vcenter")]  # fmt: skip
    assert len(vcenter_mounts) == 3
    assert all(m["readOnly"] for m in vcenter_mounts)


@pytest.mark.parametrize("service", sorted(VCENTER_SERVICES))
def test_the_env_names_each_item_by_its_index(
    documents: list[dict[str, Any]], service: str
) -> None:
    _, container = pod_and_container(one(documents, "Deployment", service))
    by_secret: dict[str, list[str]] = {}
    for env in container["env"]:
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            by_secret.setdefault(ref["name"], []).append(env["name"])
    for index, (secret_name, _) in enumerate(EXPECTED.values()):
        prefix = f"HOSTAFFINITY_VCENTERS__{index}__"
        assert by_secret[secret_name] == [
            prefix + "HOST", prefix + "USERNAME", prefix + "PASSWORD", prefix + "THUMBPRINT",
        ]  # fmt: skip


def test_only_the_two_vcenter_services_see_the_further_secrets(
    documents: list[dict[str, Any]],
) -> None:
    holders = {
        (d["kind"], d["metadata"]["name"])
        for d in documents
        if "hostaffinity-vcenter-west" in yaml.safe_dump(d)
    }
    assert holders == {("Deployment", "node-labeller"), ("Deployment", "drs-translator")}


def test_the_deployments_stay_valid_kubernetes_objects(documents: list[dict[str, Any]]) -> None:
    for service in VCENTER_SERVICES:
        kubernetes_validate.validate(
            one(documents, "Deployment", service), KUBERNETES_VERSION, strict=True
        )


def test_the_chart_lints_clean_with_further_vcenters() -> None:
    report = helm.lint(CHART, VALUES, strict=True, namespace=NAMESPACE)
    assert not [m for m in report["messages"] if m["severity"] >= 2], report
    assert not report["errors"], report


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"additionalVcenters": [{"name": "vcenter", "secret": "s"}]}, "vcenter"),
        (
            {
                "vcenter": {"name": "vc-east"},
                "additionalVcenters": [
                    {"name": "vc-west", "secret": "a"},
                    {"name": "vc-west", "secret": "b"},
                ],
            },
            "vc-west",
        ),
    ],
    ids=["the default vcenter's name", "two further items"],
)
def test_a_vcenter_name_given_twice_fails_the_render(values: dict[str, Any], named: str) -> None:
    with pytest.raises(helm.HelmError, match=f'the vCenter name "{named}" is already taken'):
        render_chart(values)


@pytest.mark.parametrize(
    ("item", "complaint"),
    [
        ({"name": "vc-west"}, "secret"),
        ({"name": "", "secret": "s"}, "name"),
        ({"name": "vc-west", "secret": "s", "host": "vc-west.example.com"}, "host"),
    ],
    ids=["no secret", "empty name", "a key the item does not have"],
)
def test_a_malformed_item_fails_at_install(item: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmError, match=complaint):
        render_chart({"additionalVcenters": [item]})


def test_an_empty_list_renders_the_default() -> None:
    assert render_chart({"additionalVcenters": []}) == render_chart()


def test_the_notes_name_every_secret_to_check() -> None:
    notes = render_notes(VALUES)
    for secret_name in SECRETS:
        assert f"describe secret {secret_name}" in notes
