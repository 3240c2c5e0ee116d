"""The chart's own vCenter Secret (`vcenter.secret.create`) trusts vCenter with a CA bundle or a
thumbprint: rendered with each, the node-labeller's and drs-translator's Deployments, given the
env and volumes their pods would get from that Secret, pass `--check-config` against a TLS vcsim
(a VMCA-signed vCenter). Without either, the chart refuses to render rather than crash-loop.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from hostaffinity.runtime.http.certificates import ServingIdentity
from hostaffinity.runtime.vcenter.trust import thumbprint_of
from tests.docs_install_harness import VCENTER_SERVICES, check_config, vmca
from tests.platform.helm_chart import render_chart
from tests.platform.vcsim import PASSWORD, USERNAME, Vcsim, VcsimFactory


@pytest.fixture
def identity() -> ServingIdentity:
    return vmca("127.0.0.1")


@pytest.fixture
def vc(vcsim: VcsimFactory, identity: ServingIdentity) -> Vcsim:
    return vcsim(hosts=1, vms=1, tls=identity)


def secret_values(vc: Vcsim, **trust: str) -> dict[str, Any]:
    account = {"host": vc.host, "username": USERNAME, "password": PASSWORD}
    return {"vcenter": {"secret": {"create": True, **account, **trust}}}


@pytest.mark.parametrize("way", ["caCrt", "thumbprint"])
def test_the_chart_trusts_a_tls_vcenter(
    way: str, vc: Vcsim, identity: ServingIdentity, tmp_path: Path
) -> None:
    trust = {
        "caCrt": identity.ca_pem.decode(),
        "thumbprint": thumbprint_of(ssl.PEM_cert_to_DER_cert(identity.cert_pem.decode())),
    }[way]
    documents = render_chart(secret_values(vc, **{way: trust}))
    for service in VCENTER_SERVICES:
        checked = check_config(documents, service, vc, tmp_path)
        assert checked.returncode == 0, (service, checked.stderr)


def test_a_stranger_ca_is_refused_naming_the_key(vc: Vcsim, tmp_path: Path) -> None:
    """The check does check: a bundle that did not sign vcsim's certificate is refused."""
    documents = render_chart(secret_values(vc, caCrt=vmca("x").ca_pem.decode()))
    checked = check_config(documents, "node-labeller", vc, tmp_path)
    assert checked.returncode == 2
    assert "set vcenters[0].ca_file to the CA bundle that signed it" in checked.stderr


def test_a_chart_made_secret_without_trust_is_refused_at_render() -> None:
    with pytest.raises(helm.HelmError, match=r"caCrt or vcenter\.secret\.thumbprint"):
        render_chart({"vcenter": {"secret": {"create": True, "host": "h", "username": "u",
                                              "password": "p"}}})  # fmt: skip


def test_the_schema_takes_a_thumbprint_and_refuses_a_malformed_one() -> None:
    good = "SHA256:" + ":".join(["AB"] * 32)
    values = {"vcenter": {"secret": {"create": True, "host": "h", "username": "u",
                                     "password": "p", "thumbprint": good}}}  # fmt: skip
    (secret,) = [d for d in render_chart(values) if d["kind"] == "Secret"]
    assert secret["stringData"]["thumbprint"] == good
    values["vcenter"]["secret"]["thumbprint"] = "AB:CD"
    with pytest.raises(helm.HelmError, match="thumbprint"):
        render_chart(values)
