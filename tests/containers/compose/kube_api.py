"""The Kubernetes API double in place of compose's k3s (tests/containers/compose/override.yaml).

Serves on 0.0.0.0:6443, plain HTTP, with `--nodes` Ready nodes, and writes a kubeconfig for it
(server http://k3s:6443, the double's admin token) where k3s writes its own: the k3s-output
volume. Run from the node-labeller image, which has its dependencies (aiohttp, PyYAML,
kubernetes_asyncio), with the repository's tests/ mounted:

    python -m tests.containers.compose.kube_api --kubeconfig /output/kubeconfig.yaml
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import yaml

from tests.platform.kube_double.double import KubeDouble
from tests.platform.kube_double.serve import until_signalled

READY = {"conditions": [{"type": "Ready", "status": "True"}]}


async def serve(nodes: int, kubeconfig: Path, server: str) -> None:
    double = KubeDouble()
    for index in range(1, nodes + 1):
        double.seed(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"k3s-node-{index}", "labels": {}},
                "status": READY,
            }
        )
    await double.start("0.0.0.0", 6443)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "admin", "user": {"token": double.token}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "admin"}}],
        "current-context": "double",
    }
    written = kubeconfig.with_suffix(".tmp")
    written.write_text(yaml.safe_dump(config), encoding="utf-8")
    os.chmod(written, 0o644)
    written.replace(kubeconfig)
    print(f"serving on 0.0.0.0:6443; kubeconfig {kubeconfig}", flush=True)
    await until_signalled(double)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--server", default="http://k3s:6443")
    args = parser.parse_args()
    asyncio.run(serve(args.nodes, args.kubeconfig, args.server))


if __name__ == "__main__":
    main()
