"""What `hostaffinity demo` touches, through the public surfaces only: the Kubernetes API (its
writes), the vCenter API (vMotions, reading DRS rules) and the event stream, read as the
read-only `cli` identity (never written).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes_asyncio.client.exceptions import ApiException
from nats.js.api import DeliverPolicy
from pyVmomi import vim

from hostaffinity.cli.connections import open_bus
from hostaffinity.cli.history import event_type, summary
from hostaffinity.cli.seeding import inventory, wait_for_task
from hostaffinity.cli.vcenter_access import login
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.kube.client import NODES, KubeClient, ResourceRef
from hostaffinity.runtime.process.cancellation import wait_set
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.schema import (
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    LABEL_ESXI_HOST,
    UNDECODABLE,
    TopologyEvent,
    decode_event,
)

SOURCE_WIDTH = 15
VMIS: Final = "virtualmachineinstances"
MIGRATIONS: Final = "virtualmachineinstancemigrations"
_VM: Any = vim.vm  # data-object constructors pyVmomi leaves untyped


class _NotServed(Exception):
    """The API server does not serve the resource (KubeVirt is not installed)."""


class StepFailed(Exception):
    """A check did not hold: what was expected and what was seen."""


class NotRun(Exception):
    """Why a step cannot run here."""


@dataclass
class EventTail:
    """Every event published since the demo started, printed as it arrives when it concerns the
    step running (`show`)."""

    seen: list[TopologyEvent] = field(default_factory=list)
    show: Callable[[TopologyEvent], bool] = lambda _event: False
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, event: TopologyEvent) -> None:
        self.seen.append(event)
        if self.show(event):
            print(
                f"   {event.source:<{SOURCE_WIDTH}} {event_type(event)}: {summary(event)}",
                flush=True,
            )
        self.arrived.set()

    async def until(
        self, wanted: Callable[[list[TopologyEvent]], bool], within: float, what: str
    ) -> None:
        """Until `wanted(events so far)` holds; StepFailed naming `what` after `within` s."""
        deadline = time.monotonic() + within
        while not wanted(self.seen):
            self.arrived.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise StepFailed(f"no {what} within {within:g} s")
            await wait_set(self.arrived, left)


@contextlib.asynccontextmanager
async def following(settings: NatsSettings) -> AsyncIterator[EventTail]:
    """The event stream from now on, read as the identity `settings` name."""
    async with open_bus(settings, name="hostaffinity-demo") as bus, _tail(bus) as tail:
        yield tail


@contextlib.asynccontextmanager
async def _tail(bus: Bus) -> AsyncIterator[EventTail]:
    tail = EventTail()
    subscription = await bus.js.subscribe(
        f"{EVENTS_SUBJECT_PREFIX}.>",
        stream=EVENTS_STREAM,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.NEW,
    )

    async def read() -> None:
        async for message in subscription.messages:
            try:
                tail.add(decode_event(message.data))
            except UNDECODABLE as error:
                print(f"   undecodable event on {message.subject}: {error}", file=sys.stderr)

    reader = asyncio.create_task(read())
    try:
        yield tail
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


@dataclass
class Kube:
    """The Kubernetes calls the demo makes: JSON in, JSON out."""

    client: KubeClient
    namespace: str

    @property
    def pods(self) -> ResourceRef:
        return ResourceRef("", "v1", "pods", self.namespace)

    async def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        return json.loads(await self.client.request("GET", path, query=query))

    async def send(self, method: str, path: str, body: Any, patch: bool = False) -> Any:
        kind = "application/merge-patch+json" if patch else "application/json"
        return json.loads(await self.client.request(method, path, body=body, content_type=kind))

    async def nodes(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = (await self.get(NODES.path()))["items"]
        return listed

    async def pods_of(self, app: str) -> list[dict[str, Any]]:
        """The demo's pods labelled app=`app`, terminating ones included."""
        listed = await self.get(self.pods.path(), {"labelSelector": f"app={app}"})
        return list(listed["items"])

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create it; a pod bound by nodeName is reported Running and Ready, as a kubelet would."""
        created: dict[str, Any] = await self.send("POST", self.pods.path(), manifest)
        if manifest["spec"].get("nodeName"):
            status = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "startTime": created["metadata"]["creationTimestamp"],
            }
            path = self.pods.path(created["metadata"]["name"]) + "/status"
            created = await self.send("PATCH", path, {"status": status}, patch=True)
        return created

    def kubevirt(self, plural: str) -> ResourceRef:
        """A KubeVirt resource in the demo's namespace."""
        return ResourceRef("kubevirt.io", "v1", plural, self.namespace)

    async def delete_demo_pods(self) -> None:
        """What a previous run or step left in the demo's namespace goes at once: pods, and
        the KubeVirt VMIs and migrations where the cluster serves KubeVirt's API."""
        await self._delete_all(self.pods)
        for plural in (VMIS, MIGRATIONS):
            with contextlib.suppress(_NotServed):
                await self._delete_all(self.kubevirt(plural))

    async def _delete_all(self, resource: ResourceRef) -> None:
        try:
            listed = await self.get(resource.path())
        except ApiException as error:
            if error.status == 404:
                raise _NotServed from None
            raise
        for item in listed["items"]:
            try:
                await self.client.request(
                    "DELETE",
                    resource.path(item["metadata"]["name"]),
                    query={"gracePeriodSeconds": "0"},
                )
            except ApiException as error:
                if error.status != 404:  # gone already: nothing to do
                    raise

    async def create_vmi(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a VirtualMachineInstance (its status as the manifest says: a VMI has no
        status subresource)."""
        created: dict[str, Any] = await self.send(
            "POST", self.kubevirt(VMIS).path(), manifest
        )  # fmt: skip
        return created

    async def migrations(self) -> list[dict[str, Any]]:
        """The VirtualMachineInstanceMigrations in the demo's namespace."""
        return list((await self.get(self.kubevirt(MIGRATIONS).path()))["items"])

    async def event_messages(self, kind: str, reason: str) -> dict[str, str]:
        """The messages of the namespace's Events with that reason, by the object they are about."""
        events = ResourceRef("", "v1", "events", self.namespace)
        return {
            item["involvedObject"]["name"]: item.get("message", "")
            for item in (await self.get(events.path()))["items"]
            if item["involvedObject"].get("kind") == kind and item.get("reason") == reason
        }

    async def set_taints(self, node: str, taints: list[dict[str, str]]) -> None:
        await self.send("PATCH", NODES.path(node), {"spec": {"taints": taints}}, patch=True)

    async def ensure_namespace(self) -> None:
        namespaces = ResourceRef("", "v1", "namespaces")
        listed = await self.get(namespaces.path())
        if self.namespace not in {item["metadata"]["name"] for item in listed["items"]}:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            await self.send("POST", namespaces.path(), body)

    async def set_unschedulable(self, node: str, unschedulable: bool) -> None:
        await self.send(
            "PATCH", NODES.path(node), {"spec": {"unschedulable": unschedulable}}, patch=True
        )

    async def has_live_scheduler(self) -> bool:
        """kube-scheduler holds and renews the Lease kube-system/kube-scheduler."""
        leases = ResourceRef("coordination.k8s.io", "v1", "leases", "kube-system")
        listed = await self.get(leases.path())
        return any(
            item["metadata"]["name"] == "kube-scheduler"
            and (item.get("spec") or {}).get("holderIdentity")
            for item in listed["items"]
        )


def host_of(node: dict[str, Any]) -> str | None:
    label: str | None = node["metadata"].get("labels", {}).get(LABEL_ESXI_HOST)
    return label


@dataclass
class VCenter:
    """The vCenter calls the demo makes (pyVmomi is blocking: each runs in a thread)."""

    service_instance: vim.ServiceInstance

    @classmethod
    async def connect(cls, settings: VCenterSettings) -> VCenter:
        fix = "is `make dev` running? (its vcsim is the default --vcenter), or pass --vcenter URL"
        return cls(await asyncio.to_thread(login, settings, fix))

    def _relocate(self, vm_name: str, host_name: str) -> None:
        content: Any = self.service_instance.RetrieveContent()
        (vm,) = [vm for vm in inventory(content, vim.VirtualMachine) if vm.name == vm_name]
        (host,) = [host for host in inventory(content, vim.HostSystem) if host.name == host_name]
        wait_for_task(vm.RelocateVM_Task(_VM.RelocateSpec(host=host)))

    async def vmotion(self, vm_name: str, host_name: str) -> None:
        """Move the VM to that host, as a vMotion by hand or by DRS would."""
        await asyncio.to_thread(self._relocate, vm_name, host_name)

    def _rules(self) -> list[tuple[str, set[str]]]:
        return [
            (str(rule.name), {str(vm.name) for vm in rule.vm})
            for cluster in inventory(
                self.service_instance.RetrieveContent(), vim.ClusterComputeResource
            )
            for rule in cluster.configurationEx.rule
            if isinstance(rule, vim.cluster.AntiAffinityRuleSpec)
        ]

    async def anti_affinity_rules(self) -> list[tuple[str, set[str]]]:
        """(rule name, VM names) of every DRS VM-VM anti-affinity rule."""
        return await asyncio.to_thread(self._rules)
