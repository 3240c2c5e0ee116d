"""Seeding a vCenter simulator with one VM per Kubernetes node, for clusters with no vSphere.

kind and k3s clusters run on no vCenter; to see the node-labeller work there, the simulator gets a
VM named like each node, spread round-robin over its ESXi hosts, and the labeller matches them by
name. Running it again creates only the VMs that are missing.
"""

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pyVmomi import vim

from hostaffinity.runtime.vcenter.settings import VCenterSettings

log = logging.getLogger(__name__)
TASK_POLL_SECONDS = 0.05
_VM: Any = vim.vm  # data-object constructors pyVmomi leaves untyped


@dataclass(frozen=True, slots=True)
class SeedResult:
    created: dict[str, str]  # node name -> host name
    existing: list[str]


def vcenter_settings(url: str) -> VCenterSettings:
    """Settings from `http://user:pass@host:port/sdk` (the form vcsim prints)."""
    parts = urlsplit(url)
    if not parts.hostname or parts.username is None or parts.password is None:
        raise ValueError(f"--vcenter {url!r}: expected a URL like http://user:pass@host:8989/sdk")
    protocol: Literal["https", "http"] = "https" if parts.scheme == "https" else "http"
    return VCenterSettings(
        host=parts.hostname,
        port=parts.port or (443 if protocol == "https" else 80),
        username=parts.username,
        password=parts.password,
        protocol=protocol,
        verify_tls=False,
    )


def seed_node_vms(service_instance: vim.ServiceInstance, node_names: Sequence[str]) -> SeedResult:
    """Create a powered-on VM per node that has none, placed round-robin over all hosts."""
    content: Any = service_instance.RetrieveContent()  # pyVmomi objects: typed at this edge only
    existing = {vm.name for vm in inventory(content, vim.VirtualMachine)}
    hosts = sorted(inventory(content, vim.HostSystem), key=lambda host: host.name)
    if not hosts:
        raise RuntimeError("the vCenter has no ESXi hosts to place node VMs on")
    datacenter = next(iter(inventory(content, vim.Datacenter)))
    created: dict[str, str] = {}
    missing = [name for name in node_names if name not in existing]
    for index, name in enumerate(missing):
        host = hosts[(len(existing) + index) % len(hosts)]
        spec = _VM.ConfigSpec(
            name=name,
            guestId="otherGuest",
            files=_VM.FileInfo(vmPathName=f"[{_datastore_name(host)}]"),
        )
        task = datacenter.vmFolder.CreateVM_Task(spec, host.parent.resourcePool, host)
        wait_for_task(task)
        wait_for_task(task.info.result.PowerOnVM_Task())
        created[name] = host.name
        log.info("created VM %s on %s", name, host.name)
    return SeedResult(created=created, existing=sorted(set(node_names) & existing))


def inventory(content: Any, kind: type) -> list[Any]:
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    try:
        return list(view.view)
    finally:
        view.Destroy()


def _datastore_name(host: vim.HostSystem) -> str:
    return str(host.datastore[0].name) if host.datastore else "datastore1"


def wait_for_task(task: vim.Task) -> None:
    while task.info.state in ("queued", "running"):
        time.sleep(TASK_POLL_SECONDS)
    if task.info.state != "success":
        raise RuntimeError(f"vCenter task failed: {task.info.error}")
