"""docs/install.md and docs/vcenter-trust.md run as written: each command block, read from the
page (tests/platform/doc_commands.py), runs in bash in a fresh checkout, in the page's order,
with the real kubectl (and its kustomize) against the Kubernetes double, a `helm` that renders
with Helm's engine and applies in Helm's order, and a TLS vcsim behind `vcenter.example.com`
that also serves its trusted roots. What the page installed must then work: each vCenter
service's `--check-config`, run on the Deployment, ConfigMaps and Secret the double holds,
trusts the TLS vcsim. A page that drifts from the code fails here.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from hostaffinity.runtime.http.certificates import ServingIdentity
from scripts.release import workspace_version, write_manifests
from tests.docs_install_harness import (
    DOCS,
    NAMESPACE,
    SITE_PASSWORD,
    VCENTER_SERVICES,
    check_config,
    cluster_objects,
    fill_in_vcenter_env,
    fresh_checkout,
    site_values,
    vmca,
)
from tests.platform.doc_commands import Shell, block, blocks, command_lines
from tests.platform.kubectl import Kubectl, kubectl_on_a_double, kustomize
from tests.platform.vcenter_roots import trusted_roots_served
from tests.platform.vcsim import Vcsim, VcsimFactory

INSTALL = DOCS / "install.md"
TRUST = DOCS / "vcenter-trust.md"
VERSION = workspace_version()
# A kubectl object of the check steps: `job/x`, `deployment/x`, or `<kind> <name>`.
NAMED = re.compile(r"\b(deployment|statefulset|job)/([a-z0-9-]+)")


@pytest.fixture
def identity() -> ServingIdentity:
    """vCenter's certificate and the VMCA that signed it."""
    return vmca("127.0.0.1")


@pytest.fixture
def vc(vcsim: VcsimFactory, identity: ServingIdentity) -> Vcsim:
    return vcsim(hosts=1, vms=1, tls=identity)


# The blocks the tests run, each named by what it does and found on its page by a piece of it.
BLOCKS: dict[str, tuple[Path, str]] = {
    "copy the overlay": (INSTALL, "cp -r k8s/examples/site-overlay my-site"),
    "fetch the VMCA root into the overlay": (INSTALL, "curl -ksSo download.zip"),
    "check the overlay": (INSTALL, "kubectl kustomize my-site/"),
    "apply the overlay": (INSTALL, "kubectl apply -k my-site/"),
    "install a release manifest": (INSTALL, f"-f dist/hostaffinity-{VERSION}-base.yaml"),
    "install the monitoring manifests": (INSTALL, f"hostaffinity-{VERSION}-dashboard.yaml"),
    "install with helm": (INSTALL, f"helm install hostaffinity dist/hostaffinity-{VERSION}.tgz"),
    "make a further vCenter's Secret": (INSTALL, "create secret generic hostaffinity-vcenter-west"),
    "fetch the VMCA root": (TRUST, "curl -ksSo download.zip"),
    "give the overlay the CA": (TRUST, "cp vmca-root.crt my-site/vmca-root.crt"),
    "give the Secret the CA": (TRUST, "--from-file=ca.crt=vmca-root.crt --dry-run=client"),
    "read the thumbprint": (TRUST, "openssl s_client"),
    "give the Secret the thumbprint": (TRUST, "--from-literal=thumbprint="),
}
# Shell blocks no test here runs, and why.
NOT_RUN = {
    "condition=complete": "step 4: the bus Jobs complete (the test checks the Jobs it names)",
    "rollout status deployment/node-labeller": "step 5 (the test checks the names)",
    "port-forward": "step 6: the labeller's work, read through the bus of a live cluster",
    "hostaffinity-drs-translator --config": "an example of output, not a step",
    "uv tool install dist/hostaffinity_cli": "tests/test_release.py installs make release's CLI",
}


async def run(shell: Shell, name: str) -> str:
    """Run the block BLOCKS names; it must succeed. Its output."""
    page, containing = BLOCKS[name]
    done = await shell.run(block(page, containing).text)
    assert done.returncode == 0, f"{page.name}, {name}:\n{done.stderr}"
    return done.stdout


async def assert_the_vcenter_services_trust_vcsim(
    kubectl: Kubectl, vc: Vcsim, root: Path, *, thumbprint: bool = False
) -> None:
    """What the page installed starts: no crash loop on vCenter's certificate."""
    objects = await cluster_objects(kubectl)
    for service in VCENTER_SERVICES:
        checked = check_config(objects, service, vc, root)
        assert checked.returncode == 0, (service, checked.stderr)
        loaded = yaml.safe_load(checked.stdout)["vcenters"][0]
        assert (loaded["thumbprint"] is not None) is thumbprint, loaded


async def test_the_kustomize_install_runs_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """Step 1 to step 3 (the overlay, its CA bundle, its check, the apply) and the objects the
    checks of steps 4 and 5 name."""
    checkout = fresh_checkout(tmp_path / "checkout")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (_double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, site_values(vc, roots))
            await run(shell, "copy the overlay")
            fill_in_vcenter_env(checkout / "my-site", vc)
            await run(shell, "fetch the VMCA root into the overlay")
            await run(shell, "check the overlay")
            await run(shell, "apply the overlay")
            await assert_the_vcenter_services_trust_vcsim(kubectl, vc, tmp_path / "pods")
            checks = block(INSTALL, "rollout status deployment/node-labeller").text
            checks += block(INSTALL, "job/hostaffinity-bus-provision").text
            for kind, name in NAMED.findall(checks):
                got = await kubectl.run(["-n", NAMESPACE, "get", f"{kind}/{name}"])
                assert got.returncode == 0, got.stderr


def components_of_step_2() -> list[str]:
    """The component paths step 2's tables give, in their order."""
    text = INSTALL.read_text(encoding="utf-8")
    step = text[text.index("## 2. Choose the components") : text.index("## 3. Apply")]
    return re.findall(r"`(\.\./k8s/components/[a-z-]+)`", step)


def test_every_component_of_step_2_builds_in_the_overlay(tmp_path: Path) -> None:
    """Each path of step 2 is one kustomize finds from my-site/, alone and all of them in the
    page's order (admission-policy and cluster-wide are alternatives: one at a time)."""
    checkout = fresh_checkout(tmp_path / "checkout")
    site = checkout / "my-site"
    paths = components_of_step_2()
    assert len(paths) == 6, paths
    (checkout / "k8s" / "examples" / "site-overlay").rename(site)
    (site / "vmca-root.crt").write_text(vmca("127.0.0.1").ca_pem.decode(), encoding="utf-8")
    kustomization = yaml.safe_load((site / "kustomization.yaml").read_text())
    monitoring, admission, rest = paths[0], paths[1:3], paths[3:]
    for components in [[p] for p in paths] + [[monitoring, a, *rest] for a in admission]:
        (site / "kustomization.yaml").write_text(
            yaml.safe_dump({**kustomization, "components": components}), encoding="utf-8"
        )
        kustomize(site)


async def test_the_release_manifest_install_runs_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """The namespace, the vCenter Secret in it, the manifest; and the monitoring variant with
    its dashboard in Grafana's namespace."""
    checkout = fresh_checkout(tmp_path / "checkout")
    (checkout / "dist").mkdir()
    write_manifests(VERSION, checkout / "dist")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, site_values(vc, roots))
            await run(shell, "fetch the VMCA root")
            await run(shell, "install a release manifest")
            await assert_the_vcenter_services_trust_vcsim(kubectl, vc, tmp_path / "pods")
            namespace = double.read("v1", "namespaces", NAMESPACE)
            assert namespace is not None
            assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
                "restricted"
            )
            # Grafana's namespace is the operator's, there before.
            double.seed(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}
            )
            await run(shell, "install the monitoring manifests")
            assert double.read("v1", "configmaps", "hostaffinity-dashboard", "monitoring")


async def test_the_helm_install_runs_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """The namespace, its label, the Secret and `helm install`; then what the NOTES print."""
    checkout = fresh_checkout(tmp_path / "checkout")
    helm.package(checkout / "charts" / "hostaffinity", destination=checkout / "dist")
    (checkout / "my-values.yaml").write_text("", encoding="utf-8")  # the defaults
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (_double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, site_values(vc, roots))
            await run(shell, "fetch the VMCA root")
            printed = await run(shell, "install with helm")
            await assert_the_vcenter_services_trust_vcsim(kubectl, vc, tmp_path / "pods")
            await run_the_notes(shell, kubectl, printed)


async def run_the_notes(shell: Shell, kubectl: Kubectl, printed: str) -> None:
    """The NOTES' commands: what reads the cluster runs; what waits for controllers the
    double does not run (a Job completing, a rollout) is held to naming objects that exist."""
    notes = printed[printed.index("NOTES:") :]
    commands = [line.strip() for line in notes.splitlines() if line.startswith("  kubectl ")]
    assert commands, notes
    for line in commands:
        command = line.split("   #")[0]
        if " wait " in command or " rollout status " in command:
            for kind, name in NAMED.findall(command):
                got = await kubectl.run(["-n", NAMESPACE, "get", f"{kind}/{name}"])
                assert got.returncode == 0, (command, got.stderr)
            continue
        done = await shell.run(command)
        assert done.returncode == 0, (command, done.stderr)
        # The Secret's keys, never the password, plain or base64 (describe gives its size).
        for shown in (SITE_PASSWORD, base64.b64encode(SITE_PASSWORD.encode()).decode()):
            assert shown not in done.stdout, (command, done.stdout)


async def test_the_trust_page_fixes_a_kustomize_install(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """An overlay applied with the thumbprint-less, CA-less placeholder Secret crash-loops; the
    page's kustomize steps give the Deployments the CA (the Secret they name changes)."""
    checkout = fresh_checkout(tmp_path / "checkout")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (_double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, site_values(vc, roots))
            await run(shell, "copy the overlay")
            fill_in_vcenter_env(checkout / "my-site", vc)
            # A bundle that did not sign vcsim's certificate: the services refuse vcsim.
            stranger = vmca("127.0.0.1").ca_pem.decode()
            (checkout / "my-site" / "vmca-root.crt").write_text(stranger, encoding="utf-8")
            await run(shell, "apply the overlay")
            objects = await cluster_objects(kubectl)
            refused = check_config(objects, "node-labeller", vc, tmp_path / "before")
            assert refused.returncode == 2, refused.stderr
            assert "set vcenters[0].ca_file to the CA bundle" in refused.stderr
            await run(shell, "fetch the VMCA root")
            await run(shell, "give the overlay the CA")
            await assert_the_vcenter_services_trust_vcsim(kubectl, vc, tmp_path / "after")


async def test_the_trust_page_fixes_a_helm_install_with_a_ca_then_a_thumbprint(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """A Helm install whose Secret has no trust yet; the page's CA steps, then its thumbprint
    steps (the thumbprint the page's openssl line prints), each make the services trust vcsim."""
    checkout = fresh_checkout(tmp_path / "checkout")
    helm.package(checkout / "charts" / "hostaffinity", destination=checkout / "dist")
    (checkout / "my-values.yaml").write_text("", encoding="utf-8")
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (_double, kubectl):
            values = site_values(vc, roots)
            shell = Shell(checkout, kubectl.kubeconfig, values)
            # The install page's Helm block, its CA file a stranger's for now.
            (checkout / "vmca-root.crt").write_text(vmca("x").ca_pem.decode(), encoding="utf-8")
            await run(shell, "install with helm")
            await run(shell, "fetch the VMCA root")
            await run(shell, "give the Secret the CA")
            await assert_the_vcenter_services_trust_vcsim(kubectl, vc, tmp_path / "ca")
            fingerprint = await run(shell, "read the thumbprint")
            found = re.search(r"Fingerprint=([0-9A-F:]+)", fingerprint)
            assert found, fingerprint
            values.values["SHA256:AB:CD:...:EF"] = f"SHA256:{found[1]}"
            await run(shell, "give the Secret the thumbprint")
            await assert_the_vcenter_services_trust_vcsim(
                kubectl, vc, tmp_path / "thumbprint", thumbprint=True
            )


def test_every_command_block_of_the_install_pages_is_run_here() -> None:
    """Each shell block of the two pages is one BLOCKS names (a test above runs it), or one
    NOT_RUN says why not; each of BLOCKS is on its page."""
    for page, containing in BLOCKS.values():
        block(page, containing)
    for page in (INSTALL, TRUST):
        for found in (b for b in blocks(page) if b.is_shell):
            ran = [c for p, c in BLOCKS.values() if p == page and c in found.text]
            said = [c for c in NOT_RUN if c in found.text]
            first = command_lines(found.text)[0]
            assert ran or said, f"{page.name}: no test runs the block starting {first!r}"


async def test_several_vcenters_with_helm_run_as_written(
    vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    """The page's values (vc-east as item 0, vc-west from its own Secret), the install, then
    vc-west's Secret as the page makes it: both services trust both vCenters (here one vcsim
    under two names)."""
    checkout = fresh_checkout(tmp_path / "checkout")
    helm.package(checkout / "charts" / "hostaffinity", destination=checkout / "dist")
    page_values = block(INSTALL, "additionalVcenters:", lang="yaml").text
    (checkout / "my-values.yaml").write_text(page_values, encoding="utf-8")
    (checkout / "vc-west-vmca-root.crt").write_bytes(identity.ca_pem)  # the west VMCA's root
    with trusted_roots_served(identity) as roots:
        async with kubectl_on_a_double(tmp_path / "kube") as (_double, kubectl):
            shell = Shell(checkout, kubectl.kubeconfig, site_values(vc, roots))
            await run(shell, "fetch the VMCA root")
            await run(shell, "install with helm")
            await run(shell, "make a further vCenter's Secret")
            objects = await cluster_objects(kubectl)
            for service in VCENTER_SERVICES:
                checked = check_config(objects, service, vc, tmp_path / "pods")
                assert checked.returncode == 0, (service, checked.stderr)
                vcenters = yaml.safe_load(checked.stdout)["vcenters"]
                assert [v["name"] for v in vcenters] == ["vc-east", "vc-west"]
