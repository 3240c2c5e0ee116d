"""`hostaffinity check-cluster`: is there a Kubernetes API server the services can use?

`make dev` asks this before it starts anything, so a machine with no cluster gets one sentence
naming what is missing and how to get a local cluster, instead of a loader's traceback from
every service it would otherwise start.
"""

from __future__ import annotations

import argparse
from typing import Final

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.cli.connections import (
    CommandFailed,
    kubeconfig_path,
    kubernetes_settings,
    open_api,
)
from hostaffinity.runtime.kube.client import NODES, KubeClient, ResourceRef

GET_A_CLUSTER = (
    "get a local cluster with `kind create cluster` or `k3d cluster create` (then run this "
    "again), or run everything in containers with `docker compose up`"
)


# KubeVirt's API, asked for so that `make dev` runs the descheduler's KubeVirt side only where
# the cluster serves it (kind and k3s clusters have none).
VMIS: Final = ResourceRef("kubevirt.io", "v1", "virtualmachineinstances")
KUBEVIRT_SERVED: Final = "KubeVirt's API is served"
KUBEVIRT_ABSENT: Final = "no KubeVirt API"


async def serves_kubevirt(client: KubeClient) -> bool:
    """Whether the API server serves KubeVirt's VirtualMachineInstances to this user."""
    try:
        await client.request("GET", VMIS.path(), query={"limit": "1"})
    except ApiException as error:
        if error.status in (403, 404):
            return False
        raise
    return True


async def check_cluster(
    kubeconfig: str | None, context: str | None, answer_within: float
) -> tuple[str, bool]:
    """The API server's address once it has answered a node list, and whether it serves
    KubeVirt's API; else CommandFailed."""
    settings = kubernetes_settings(kubeconfig, context, answer_within=answer_within)
    async with open_api(settings) as client:
        try:
            await client.request("GET", NODES.path(), query={"limit": "1"})
        except ApiException as error:
            if error.status in (401, 403):
                # What the services need, said here rather than the generic refusal.
                raise CommandFailed(
                    f"the API server at {client.server} refused to list nodes for this "
                    f"kubeconfig's user ({error.status} {error.reason}): the services need to "
                    "read nodes and pods"
                ) from None
            raise
        return client.server, await serves_kubevirt(client)


async def run_check(args: argparse.Namespace) -> int:
    try:
        server, kubevirt = await check_cluster(args.kubeconfig, args.context, args.timeout)
    except CommandFailed as missing:
        raise CommandFailed(missing.problem, GET_A_CLUSTER) from None
    path = kubeconfig_path(args.kubeconfig)
    said = KUBEVIRT_SERVED if kubevirt else KUBEVIRT_ABSENT
    print(f"cluster: the API server at {server} answers (kubeconfig {path}); {said}")
    return 0


def add_check_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "check-cluster", help="is there a Kubernetes API server the services can use?"
    )
    check.add_argument("--kubeconfig", help="default: the first of KUBECONFIG, ~/.kube/config")
    check.add_argument("--context", help="default: the kubeconfig's current-context")
    check.add_argument(
        "--timeout", type=float, default=5.0, help="seconds the API server has to answer"
    )
    check.set_defaults(run=run_check)
