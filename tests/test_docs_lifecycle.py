"""docs/upgrade.md, docs/uninstall.md and the chart's README run as written, on what the install
page installed: their command blocks, read from the pages, in bash against the Kubernetes double
(tests/test_docs_install.py says how), and what they leave still trusts the TLS vcsim.
"""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import pytest

from hostaffinity.runtime.http.certificates import ServingIdentity
from scripts.release import workspace_version
from tests.docs_install_harness import (
    DOCS,
    NAMESPACE,
    ROOT,
    VCENTER_SERVICES,
    check_config,
    cluster_objects,
    fill_in_vcenter_env,
    fresh_checkout,
    site_values,
    vmca,
)
from tests.platform.doc_commands import Shell, Substitutions, block, blocks, command_lines
from tests.platform.kube_double import KubeDouble
from tests.platform.kubectl import Kubectl, kubectl_on_a_double
from tests.platform.vcenter_roots import trusted_roots_served
from tests.platform.vcsim import Vcsim, VcsimFactory

INSTALL = DOCS / "install.md"
TRUST = DOCS / "vcenter-trust.md"
UPGRADE = DOCS / "upgrade.md"
UNINSTALL = DOCS / "uninstall.md"
README = ROOT / "charts" / "hostaffinity" / "README.md"
VERSION = workspace_version()
BLOCKS: dict[str, tuple[Path, str]] = {
    "copy the overlay": (INSTALL, "cp -r k8s/examples/site-overlay my-site"),
    "fetch the VMCA root into the overlay": (INSTALL, "curl -ksSo download.zip"),
    "apply the overlay": (INSTALL, "kubectl apply -k my-site/"),
    "install with helm": (INSTALL, f"helm install hostaffinity dist/hostaffinity-{VERSION}.tgz"),
    "fetch the VMCA root": (TRUST, "curl -ksSo download.zip"),
    "delete the bus Jobs": (UPGRADE, "delete job -l app.kubernetes.io/component=bus-setup"),
    "apply the new version": (UPGRADE, "kubectl apply -k my-site/"),
    "upgrade with helm": (UPGRADE, "helm upgrade hostaffinity"),
    "stop the services": (UNINSTALL, "scale deployment --all --replicas=0"),
    "remove the manifests": (UNINSTALL, "kubectl delete -k my-site/"),
    "install the chart": (README, "helm install hostaffinity"),
    "upgrade the chart": (README, "helm upgrade hostaffinity"),
}
NOT_RUN = {
    "port-forward": "reads the bus through a port-forward of a live cluster "
    "(tests/integration/test_cli_uninstall.py runs `hostaffinity uninstall` itself)",
}
BUS_JOBS = ("hostaffinity-bus-secrets", "hostaffinity-bus-provision")


@pytest.fixture
def identity() -> ServingIdentity:
    return vmca("127.0.0.1")


@pytest.fixture
def vc(vcsim: VcsimFactory, identity: ServingIdentity) -> Vcsim:
    return vcsim(hosts=1, vms=1, tls=identity)


def versions(values: Substitutions) -> Substitutions:
    """The pages' version placeholders: the release's (an upgrade to the same version)."""
    values.values.update({"<new version>": VERSION, "<version>": VERSION})
    return values


async def run(shell: Shell, name: str) -> str:
    page, containing = BLOCKS[name]
    done = await shell.run(block(page, containing).text)
    assert done.returncode == 0, f"{page.name}, {name}:\n{done.stderr}"
    return done.stdout


async def trusted(kubectl: Kubectl, vc: Vcsim, root: Path) -> None:
    objects = await cluster_objects(kubectl)
    for service in VCENTER_SERVICES:
        checked = check_config(objects, service, vc, root / service)
        assert checked.returncode == 0, (service, checked.stderr)


async def kustomize_install(shell: Shell, checkout: Path, vc: Vcsim) -> None:
    """Install page, steps 1 and 3."""
    await run(shell, "copy the overlay")
    fill_in_vcenter_env(checkout / "my-site", vc)
    await run(shell, "fetch the VMCA root into the overlay")
    await run(shell, "apply the overlay")


async def test_the_kustomize_upgrade_runs_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    checkout = fresh_checkout(tmp_path / "checkout")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, versions(site_values(vc, roots)))
            await kustomize_install(shell, checkout, vc)
            await run(shell, "delete the bus Jobs")
            assert not [j for j in BUS_JOBS if double.read("batch/v1", "jobs", j, NAMESPACE)]
            await run(shell, "apply the new version")
            assert all(double.read("batch/v1", "jobs", j, NAMESPACE) for j in BUS_JOBS)
            await trusted(kubectl, vc, tmp_path / "pods")


async def test_the_helm_upgrade_runs_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    checkout = fresh_checkout(tmp_path / "checkout")
    helm.package(checkout / "charts" / "hostaffinity", destination=checkout / "dist")
    (checkout / "my-values.yaml").write_text("", encoding="utf-8")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, versions(site_values(vc, roots)))
            await run(shell, "fetch the VMCA root")
            await run(shell, "install with helm")
            printed = await run(shell, "upgrade with helm")
            assert "REVISION: 2" in printed
            assert double.read("v1", "secrets", "sh.helm.release.v1.hostaffinity.v2", NAMESPACE)
            await trusted(kubectl, vc, tmp_path / "pods")


async def test_the_chart_readme_runs_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """From where the packaged chart is (`./hostaffinity-<version>.tgz`): the namespace, the
    Secret with the CA bundle, the install; then the upgrade with --reuse-values."""
    checkout = fresh_checkout(tmp_path / "checkout")
    helm.package(checkout / "charts" / "hostaffinity", destination=checkout)
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (_double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, versions(site_values(vc, roots)))
            await run(shell, "fetch the VMCA root")
            await run(shell, "install the chart")
            await trusted(kubectl, vc, tmp_path / "installed")
            await run(shell, "upgrade the chart")
            await trusted(kubectl, vc, tmp_path / "upgraded")


async def test_the_uninstall_steps_run_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """Stop the services (every Deployment at 0), then delete what the overlay made: the
    namespace and the cluster-scoped objects."""
    checkout = fresh_checkout(tmp_path / "checkout")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, site_values(vc, roots))
            await kustomize_install(shell, checkout, vc)
            await run(shell, "stop the services")
            objects = await cluster_objects(kubectl)
            deployments = [d for d in objects if d["kind"] == "Deployment"]
            assert deployments
            assert {d["spec"]["replicas"] for d in deployments} == {0}
            await run(shell, "remove the manifests")
            assert double.read("v1", "namespaces", NAMESPACE) is None
            assert_no_cluster_scoped_objects_left(double)


def assert_no_cluster_scoped_objects_left(double: KubeDouble) -> None:
    for api_version, plural in (
        ("rbac.authorization.k8s.io/v1", "clusterroles"),
        ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
        ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
    ):
        left = [
            name
            for name in ("hostaffinity-node-labeller", "hostaffinity-pod-host-terms")
            if double.read(api_version, plural, name)
        ]
        assert left == [], (plural, left)


def test_every_command_block_of_these_pages_is_run_here() -> None:
    for page, containing in BLOCKS.values():
        block(page, containing)
    for page in (UPGRADE, UNINSTALL, README):
        for found in (b for b in blocks(page) if b.is_shell):
            ran = [c for p, c in BLOCKS.values() if p == page and c in found.text]
            said = [c for c in NOT_RUN if c in found.text]
            first = command_lines(found.text)[0]
            assert ran or said, f"{page.name}: no test runs the block starting {first!r}"
