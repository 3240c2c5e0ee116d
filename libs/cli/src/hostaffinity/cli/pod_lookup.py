"""The one pod (or node) `explain` asks about, read on its own before the snapshot: a mistyped
name costs one request instead of a list of every pod, and the pod's API object carries what the
snapshot's pods leave out (generateName and creation time, to find the pod's admission;
deletion; its owners, to find a virt-launcher pod's VirtualMachine)."""

from __future__ import annotations

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.affinity.model import OwnerReference
from hostaffinity.cli.connections import open_api
from hostaffinity.runtime.kube.client import NODES, ResourceRef
from hostaffinity.runtime.process.config import KubernetesSettings


class PodNotFoundError(ValueError):
    """No such pod in the API."""


class NodeNotFoundError(ValueError):
    """No such node in the API."""


class _Meta(msgspec.Struct, frozen=True, rename="camel"):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    generate_name: str = ""
    creation_timestamp: str = ""
    deletion_timestamp: str = ""
    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)


class _Status(msgspec.Struct, frozen=True):
    phase: str = ""


class PodFacts(msgspec.Struct, frozen=True):
    """What explain reads of the pod's API object itself."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status = msgspec.field(default_factory=_Status)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


def split_pod_key(text: str) -> tuple[str, str]:
    """`namespace/name` as the operator typed it; a bare name is in `default`, as kubectl's."""
    namespace, _, name = text.rpartition("/")
    if not name:
        raise ValueError(f"expected NAMESPACE/NAME, not {text!r}")
    return namespace or "default", name


async def read_pod(settings: KubernetesSettings, namespace: str, name: str) -> PodFacts:
    """The pod's API object; PodNotFoundError when there is none."""
    pods = ResourceRef("", "v1", "pods", namespace)
    async with open_api(settings) as client:
        try:
            body = await client.request("GET", pods.path(name))
        except ApiException as error:
            if error.status == 404:
                raise PodNotFoundError(
                    f"pod {namespace}/{name} does not exist (`kubectl get pods -n {namespace}` "
                    "lists the ones that do)"
                ) from None
            raise
    return msgspec.json.decode(body, type=PodFacts)


async def require_node(settings: KubernetesSettings, name: str) -> None:
    """NodeNotFoundError unless the API has a node of that name."""
    async with open_api(settings) as client:
        try:
            await client.request("GET", NODES.path(name))
        except ApiException as error:
            if error.status == 404:
                raise NodeNotFoundError(
                    f"node {name} does not exist (`kubectl get nodes` lists the ones that do)"
                ) from None
            raise
