"""The parts of a Kubernetes Node the node-labeller reads, decoded straight from API JSON."""

import msgspec


class NodeMeta(msgspec.Struct, frozen=True, rename="camel"):
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class NodeSpec(msgspec.Struct, frozen=True, rename={"provider_id": "providerID"}):
    provider_id: str = ""


class NodeSystemInfo(msgspec.Struct, frozen=True, rename={"system_uuid": "systemUUID"}):
    system_uuid: str = ""


class NodeStatus(msgspec.Struct, frozen=True, rename={"node_info": "nodeInfo"}):
    node_info: NodeSystemInfo = NodeSystemInfo()


class Node(msgspec.Struct, frozen=True):
    metadata: NodeMeta
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()

    @property
    def name(self) -> str:
        return self.metadata.name
