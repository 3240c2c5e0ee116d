"""What the install pages' tests share: a fresh checkout to run them in, the vCenter simulator
behind the pages' placeholders, and the check that what a page installed works, the services'
`--check-config` run on the objects the cluster (the double) holds against a TLS vcsim."""

from __future__ import annotations

import base64
import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hostaffinity.runtime.http.certificates import ServingIdentity, issue
from tests.platform.doc_commands import Substitutions
from tests.platform.kubectl import Kubectl
from tests.platform.pod_config import pod_filesystem
from tests.platform.vcsim import USERNAME, Vcsim

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NAMESPACE = "hostaffinity"
VCENTER_SERVICES = ("node-labeller", "drs-translator")
# The password the pages' `password='...'` becomes: one no output may show (--check-config makes
# a TLS handshake only, so vcsim never sees it).
SITE_PASSWORD = "Xq7-site-password"
# What the bus's Secrets Job makes (hostaffinity bus secrets): --check-config only needs the
# files to be there.
BUS_SECRETS = {
    "hostaffinity-nats-identities": {f"{s}.nk": "SUAFAKESEED" for s in VCENTER_SERVICES},
    "hostaffinity-nats-tls": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"},
}


def vmca(*hostnames: str) -> ServingIdentity:
    """A CA of the test's own and the certificate it signs, as a site's VMCA signs vCenter's."""
    return issue(list(hostnames), datetime.datetime.now(datetime.UTC), ca_name="test-vmca")


def fresh_checkout(destination: Path) -> Path:
    """The folders a clone of the repository gives the pages' commands: k8s/ and charts/ (its
    files/ links into k8s/ kept as links)."""
    for folder in ("k8s", "charts"):
        shutil.copytree(ROOT / folder, destination / folder, symlinks=True)
    return destination


def site_values(vc: Vcsim, roots_url: str) -> Substitutions:
    """The pages' placeholders: vCenter's name is the simulator's address, its trusted roots
    are served at `roots_url`, the account is vcsim's."""
    return Substitutions(
        {
            "https://vcenter.example.com/certs/download.zip": f"{roots_url}/certs/download.zip",
            "vcenter.example.com:443": f"{vc.host}:{vc.port}",
            "vcenter.example.com": vc.host,
            "vc-west.example.com": vc.host,  # a further vCenter: the same simulator
            "svc-hostaffinity@vsphere.local": USERNAME,
            "password='...'": f"password='{SITE_PASSWORD}'",
        }
    )


def fill_in_vcenter_env(site: Path, vc: Vcsim) -> None:
    """What step 1 asks of the operator: the account in my-site/vcenter.env."""
    (site / "vcenter.env").write_text(
        f"host={vc.host}\nusername={USERNAME}\npassword={SITE_PASSWORD}\n", encoding="utf-8"
    )


async def cluster_objects(kubectl: Kubectl) -> list[dict[str, Any]]:
    """The namespace's Deployments, ConfigMaps and Secrets as the cluster holds them."""
    got = await kubectl.run(
        ["-n", NAMESPACE, "get", "deployments,configmaps,secrets", "-o", "json"]
    )
    assert got.returncode == 0, got.stderr
    items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
    return items


def secret_data(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each Secret's keys and values (decoded), with what the bus's Job would have made."""
    found = {
        d["metadata"]["name"]: {
            **{k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()},
            **d.get("stringData", {}),  # as rendered, before the API server merges it
        }
        for d in objects
        if d["kind"] == "Secret"
    }
    return {**BUS_SECRETS, **found}


def check_config(
    objects: list[dict[str, Any]], service: str, vc: Vcsim, root: Path
) -> subprocess.CompletedProcess[str]:
    """`hostaffinity-<service> --check-config` as its pod would run it: its args, environment
    and mounted files from the cluster's objects (tests/platform/pod_config.py), vcsim's port
    added to each vCenter (a real vCenter's, 443, is the default the Secret leaves)."""
    args, environ = pod_filesystem(objects, service, secret_data(objects), root / service)
    for name in [n for n in environ if n.startswith("HOSTAFFINITY_VCENTERS__")]:
        if name.endswith("__HOST"):
            environ[name.removesuffix("HOST") + "PORT"] = str(vc.port)
    program = Path(sys.executable).parent / f"hostaffinity-{service}"
    return subprocess.run(
        [str(program), *args, "--check-config"],
        env={**environ, "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
