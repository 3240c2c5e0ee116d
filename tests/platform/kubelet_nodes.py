"""Node objects as a kubelet reports them, at their real size (~10 KB), for full-NodeList tests.

kube-scheduler with `nodeCacheCapable: false` sends every candidate Node whole (extender.go
`Filter`: `nodeList.Items = append(nodeList.Items, *nodeInfo.Node())`). A kubelet-reported Node
carries the standard labels and annotations, five conditions with messages, addresses, capacity
and allocatable, nodeInfo and up to 50 images (`nodeStatusMaxImages`), each with its digests;
the recorded ones in tests/fixtures/kube-scheduler-extender/ are the shape, not the size.
"""

from __future__ import annotations

import hashlib
from typing import Any

IMAGES_PER_NODE = 40
_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("NetworkUnavailable", "False", "CalicoIsUp", "Calico is running on this node"),
)  # fmt: skip


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _image(index: int) -> dict[str, Any]:
    repo = f"registry.example.com/team-{index % 7}/service-{index}"
    return {
        "names": [f"{repo}@sha256:{_digest(repo)}", f"{repo}:v1.{index}.0"],
        "sizeBytes": 20_000_000 + index * 1_234_567,
    }


def kubelet_node(name: str, index: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Ready worker Node named `name`, as its kubelet would have written it."""
    at = "2026-11-20T08:00:00Z"
    ip = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"{_digest(name)[:8]}-0000-4000-8000-{_digest(name)[:12]}",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": at,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "vsphere-vm.cpu-16.mem-64gb.os-ubuntu",
                "topology.kubernetes.io/region": "dc0",
                "topology.kubernetes.io/zone": f"zone-{index % 3}",
                **(labels or {}),
            },
            "annotations": {
                "csi.volume.kubernetes.io/nodeid": f'{{"csi.vsphere.vmware.com":"{name}"}}',
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "projectcalico.org/IPv4Address": f"{ip}/16",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"192.168.{index % 256}.0/24",
            "podCIDRs": [f"192.168.{index % 256}.0/24"],
            "providerID": f"vsphere://{_digest(name)[:8]}-{_digest(name)[8:12]}",
        },
        "status": {
            "capacity": {"cpu": "16", "ephemeral-storage": "203056560Ki", "hugepages-1Gi": "0",
                         "hugepages-2Mi": "0", "memory": "65842652Ki", "pods": "110"},
            "allocatable": {"cpu": "16", "ephemeral-storage": "187136925387", "hugepages-1Gi": "0",
                            "hugepages-2Mi": "0", "memory": "65740252Ki", "pods": "110"},
            "conditions": [
                {"type": kind, "status": status, "lastHeartbeatTime": at,
                 "lastTransitionTime": at, "reason": reason, "message": message}
                for kind, status, reason, message in _CONDITIONS
            ],
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _digest(f"machine-{name}")[:32],
                "systemUUID": _digest(f"uuid-{name}")[:32],
                "bootID": _digest(f"boot-{name}")[:32],
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.36.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [_image(index * 3 + i) for i in range(IMAGES_PER_NODE)],
        },
    }  # fmt: skip
