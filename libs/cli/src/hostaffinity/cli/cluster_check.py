"""`hostaffinity check-cluster`: is there a Kubernetes API server the services can use?

`make dev` asks this before it starts anything, so a machine with no cluster gets one sentence
naming what is missing and how to get a local cluster, instead of a loader's traceback from
every service it would otherwise start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.config import KubernetesSettings
from hostaffinity.runtime.kube import NODES, KubeClient, api_client

GET_A_CLUSTER = (
    "get a local cluster with `kind create cluster` or `k3d cluster create` (then run this "
    "again), or run everything in containers with `docker compose up`"
)


class ClusterMissing(Exception):
    """What is missing, in words for the person at the terminal."""


def kubeconfig_path(given: str | None) -> Path:
    """The file the loader would read: the option, else the first of KUBECONFIG, else
    ~/.kube/config (as kubectl chooses)."""
    if given:
        return Path(given)
    from_env = os.environ.get("KUBECONFIG", "")
    first = next((part for part in from_env.split(os.pathsep) if part), None)
    return Path(first) if first else Path.home() / ".kube" / "config"


def _read_kubeconfig(path: Path, context: str | None) -> dict[str, Any]:
    where = f"{path} ({'from KUBECONFIG' if os.environ.get('KUBECONFIG') else 'the default'})"
    if not path.is_file():
        raise ClusterMissing(f"no kubeconfig: {where} does not exist")
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ClusterMissing(f"the kubeconfig {path} cannot be read: {error}") from None
    if not isinstance(loaded, dict) or not loaded.get("contexts"):
        raise ClusterMissing(f"the kubeconfig {path} names no cluster (no contexts)")
    chosen = context or loaded.get("current-context")
    if not chosen:
        raise ClusterMissing(f"the kubeconfig {path} has no current-context")
    names = {entry.get("name") for entry in loaded["contexts"] if isinstance(entry, dict)}
    if chosen not in names:
        raise ClusterMissing(f"the kubeconfig {path} has no context named {chosen!r}")
    return loaded


async def check_cluster(path: Path, context: str | None, answer_within: float) -> str:
    """The API server's address once it has answered a node list; else ClusterMissing."""
    _read_kubeconfig(path, context)
    settings = KubernetesSettings(
        kubeconfig=str(path),
        context=context,
        request_timeout_seconds=answer_within,
        connect_timeout_seconds=answer_within,
    )
    try:
        api = await api_client(settings)
    except Exception as error:  # the loader's many failure types: all mean one thing here
        raise ClusterMissing(f"the kubeconfig {path} cannot be used: {error}") from None
    server = str(api.configuration.host)
    try:
        async with asyncio.timeout(answer_within):
            await KubeClient(api, settings).request("GET", NODES.path(), query={"limit": "1"})
    except ApiException as error:
        if error.status in (401, 403):
            raise ClusterMissing(
                f"the API server at {server} refused to list nodes for this kubeconfig's user "
                f"({error.status} {error.reason}): the services need to read nodes and pods"
            ) from None
        raise ClusterMissing(
            f"the API server at {server} answered {error.status} {error.reason}"
        ) from None
    except TimeoutError:
        raise ClusterMissing(
            f"the API server at {server} did not answer within {answer_within:g} s"
        ) from None
    except OSError as error:
        raise ClusterMissing(f"the API server at {server} cannot be reached: {error}") from None
    finally:
        await api.close()
    return server


async def run_check(args: argparse.Namespace) -> int:
    path = kubeconfig_path(args.kubeconfig)
    try:
        server = await check_cluster(path, args.context, args.timeout)
    except ClusterMissing as missing:
        raise RuntimeError(f"{missing}; {GET_A_CLUSTER}") from None
    print(f"cluster: the API server at {server} answers (kubeconfig {path})")
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
