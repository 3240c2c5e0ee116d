"""`hostaffinity bus secrets`, as the Job runs it, against the Kubernetes API double: it makes
both Secrets once, keeps them on every later run, and adds only the identities a newer release
brings (an upgrade keeps every seed in use)."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.cli.bus_access import IDENTITY_NAMES
from hostaffinity.cli.bus_credentials import IDENTITIES_SECRET, TLS_SECRET, public_key
from hostaffinity.cli.bus_subscribers import SUBSCRIBERS_CONF, Subscriber, render_subscribers_conf
from hostaffinity.cli.kubernetes_subscribers import (
    CA_KEY,
    SEED_KEY,
    SUBSCRIBERS_SECRET,
    seed_secret_name,
)
from tests.platform.kube_double import KubeDouble

CLI = Path(sys.executable).parent / "hostaffinity"
NAMESPACE = "hostaffinity"


async def hostaffinity(kubeconfig: Path, *argv: str) -> str:
    """The command as the Job (or an operator) runs it in the namespace; its stdout."""
    run = await asyncio.create_subprocess_exec(
        str(CLI), *argv, "--namespace", NAMESPACE, "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(run.communicate(), 60)
    assert run.returncode == 0, err.decode()
    return out.decode()


async def bus_secrets(kubeconfig: Path) -> str:
    return await hostaffinity(kubeconfig, "bus", "secrets")


def stored(kube: KubeDouble, name: str) -> dict[str, Any]:
    secret = kube.read("v1", "secrets", name, NAMESPACE)
    assert secret is not None, name
    return secret


@pytest.fixture
async def first(kube_double: KubeDouble, kubeconfig: Path) -> str:
    """The Job's first run in a fresh namespace; its output."""
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return await bus_secrets(kubeconfig)


async def test_secrets_are_made_once_kept_and_completed_for_a_new_identity(
    kube_double: KubeDouble, kubeconfig: Path, first: str
) -> None:
    assert f"secret {NAMESPACE}/{IDENTITIES_SECRET}: created" in first
    assert f"secret {NAMESPACE}/{TLS_SECRET}: created" in first
    identities = stored(kube_double, IDENTITIES_SECRET)["data"]
    assert set(identities) == {f"{n}.{s}" for n in IDENTITY_NAMES for s in ("nk", "pub")}
    tls = stored(kube_double, TLS_SECRET)["data"]

    again = await bus_secrets(kubeconfig)
    assert "created" not in again, again
    assert "added" not in again, again
    assert stored(kube_double, IDENTITIES_SECRET)["data"] == identities
    assert stored(kube_double, TLS_SECRET)["data"] == tls

    # An install made before the admission webhook had an identity of its own.
    older = stored(kube_double, IDENTITIES_SECRET)
    older["data"] = {k: v for k, v in identities.items() if not k.startswith("admission-webhook.")}
    kube_double.seed(older)
    upgraded = await bus_secrets(kubeconfig)
    assert f"secret {NAMESPACE}/{IDENTITIES_SECRET}: added admission-webhook" in upgraded
    now = stored(kube_double, IDENTITIES_SECRET)["data"]
    assert {k: v for k, v in now.items() if k in older["data"]} == older["data"]  # kept
    assert base64.b64decode(now["admission-webhook.nk"]).startswith(b"SU")  # a user seed
    assert base64.b64decode(now["admission-webhook.pub"]).startswith(b"U")


def secret_file(kube: KubeDouble, name: str, key: str) -> bytes:
    return base64.b64decode(stored(kube, name)["data"][key])


async def test_subscribers_live_in_secrets_the_nats_pods_mount_and_each_release_renders(
    kube_double: KubeDouble, kubeconfig: Path, first: str
) -> None:
    assert f"secret {NAMESPACE}/{SUBSCRIBERS_SECRET}: created" in first
    assert secret_file(kube_double, SUBSCRIBERS_SECRET, SUBSCRIBERS_CONF).decode() == (
        render_subscribers_conf([])
    )

    added = await hostaffinity(
        kubeconfig, "bus", "subscriber", "add", "audit", "--events", "pod.evicted"
    )
    # Without --nats the consumer waits for a second run; the identity is there already.
    assert "run this command again (with --nats)" in added
    seed = secret_file(kube_double, seed_secret_name("audit"), SEED_KEY)
    assert seed.startswith(b"SU")
    ca = secret_file(kube_double, seed_secret_name("audit"), CA_KEY)
    assert ca == secret_file(kube_double, TLS_SECRET, CA_KEY)
    subscriber = Subscriber("audit", ("pod.evicted",), public_key(seed))
    assert secret_file(kube_double, SUBSCRIBERS_SECRET, SUBSCRIBERS_CONF).decode() == (
        render_subscribers_conf([subscriber])
    )
    listed = await hostaffinity(kubeconfig, "bus", "subscriber", "list")
    assert listed.startswith(f"audit\tpod.evicted\tSecret {NAMESPACE}/{seed_secret_name('audit')}")
    # Adding again keeps the seed (its programs keep connecting) and changes only the types.
    await hostaffinity(
        kubeconfig, "bus", "subscriber", "add", "audit", "--events", "pod.evicted,vm.moved"
    )
    assert secret_file(kube_double, seed_secret_name("audit"), SEED_KEY) == seed

    again = await bus_secrets(kubeconfig)
    assert "rendered again" not in again, again
    # A file an older release rendered (an older table) is rendered again by this one.
    older = stored(kube_double, SUBSCRIBERS_SECRET)
    older["data"][SUBSCRIBERS_CONF] = base64.b64encode(b"# an older table\n").decode()
    kube_double.seed(older)
    upgraded = await bus_secrets(kubeconfig)
    assert f"secret {NAMESPACE}/{SUBSCRIBERS_SECRET}: rendered again" in upgraded
    subscriber = Subscriber("audit", ("pod.evicted", "vm.moved"), public_key(seed))
    assert secret_file(kube_double, SUBSCRIBERS_SECRET, SUBSCRIBERS_CONF).decode() == (
        render_subscribers_conf([subscriber])
    )
