"""The real kubectl against the double as against a real kube-apiserver v1.36: `kubectl --server`
lists nodes in the server's own columns (the meta.k8s.io/v1 Table kubectl asks for), and `kubectl
drain` of a node whose pods a PodDisruptionBudget covers cordons it, lists its pods by field
selector and evicts each through the Eviction subresource -- never a plain DELETE -- retrying
after a 429 while the budget forbids, as kubectl's drain helper does (kubectl v1.36
pkg/drain/drain.go: CheckEvictionSupport reads `pods/eviction` in /api/v1's discovery, evictPods
retries a TooManyRequests every 5 s, waitForDelete polls each pod until it is gone).
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.runtime.http.certificates import issue
from tests.platform.kube_double import Exchange, KubeDouble
from tests.platform.kube_double.tables import human_duration
from tests.platform.kubectl import Kubectl

NAMESPACE = "shop"
OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "web-5d8f7",
    "uid": "5f0c4a9e-8a55-4b8e-9a3b-2f4f1d1c0a01",
    "controller": True,
    "blockOwnerDeletion": True,
}


def node(name: str, *, roles: tuple[str, ...] = (), unschedulable: bool = False) -> dict[str, Any]:
    """A Node as its kubelet reports it: Ready, its kubelet's version, its addresses."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {f"node-role.kubernetes.io/{role}": "" for role in roles},
        },
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            "nodeInfo": {"kubeletVersion": "v1.36.2", "osImage": "Debian GNU/Linux 12"},
        },
    }


def pod(name: str, node_name: str) -> dict[str, Any]:
    """A ReplicaSet's running pod, bound to `node_name`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": "web"},
            "ownerReferences": [OWNER],
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "web", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }


def budget_status(healthy: int) -> dict[str, Any]:
    """What the disruption controller writes for `minAvailable: 1` over two expected pods."""
    return {
        "observedGeneration": 1,
        "disruptionsAllowed": max(0, healthy - 1),
        "currentHealthy": healthy,
        "desiredHealthy": 1,
        "expectedPods": 2,
    }


def kubectl_with_flags(folder: Path, ca_pem: bytes) -> Kubectl:
    """kubectl with no kubeconfig at all (`flags` gives the server, token and CA)."""
    (folder / "ca.crt").write_bytes(ca_pem)
    return Kubectl(folder / "no-kubeconfig", folder)


def flags(double: KubeDouble, folder: Path) -> list[str]:
    ca = str(folder / "ca.crt")
    return ["--server", double.url, "--token", double.token, "--certificate-authority", ca]


async def test_kubectl_server_gets_nodes_in_the_servers_columns(tmp_path: Path) -> None:
    identity = issue(["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    double = KubeDouble()
    await double.start(tls=identity)
    try:
        double.seed(node("cp-1", roles=("control-plane",)))
        double.seed(node("worker-1", unschedulable=True))
        kubectl = kubectl_with_flags(tmp_path, identity.ca_pem)
        got = await kubectl.run([*flags(double, tmp_path), "get", "nodes"])
        wide = await kubectl.run([*flags(double, tmp_path), "get", "nodes", "-o", "wide"])
    finally:
        await double.stop()
    assert got.returncode == 0, got.stderr
    rows = [line.split() for line in got.stdout.splitlines()]
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [(r[0], r[1], r[2], r[4]) for r in rows[1:]] == [
        ("cp-1", "Ready", "control-plane", "v1.36.2"),
        ("worker-1", "Ready,SchedulingDisabled", "<none>", "v1.36.2"),
    ]
    assert all(r[3].endswith("s") for r in rows[1:])  # seconds old
    assert wide.returncode == 0, wide.stderr
    header = wide.stdout.splitlines()[0].split()
    assert header[5:8] == ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE"]
    assert "10.0.0.7" in wide.stdout.splitlines()[1].split()


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (2 * 86400 + 3 * 3600, "2d3h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400 + 10 * 86400, "3y10d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_the_age_column_shortens_as_the_server_does(seconds: int, shown: str) -> None:
    """apimachinery pkg/util/duration HumanDuration: the AGE kubectl shows from a Table."""
    assert human_duration(seconds) == shown


def evictions(journal: list[Exchange]) -> list[tuple[str, int]]:
    return [
        (e.path.split("/")[-2], e.status)
        for e in journal
        if e.method == "POST" and e.path.endswith("/eviction")
    ]


async def kubelet_and_controllers(double: KubeDouble, journal: list[Exchange]) -> None:
    """What the cluster around the API server does while the drain runs: the kubelet of
    `node-1` ends each pod being terminated, and once the budget has refused an eviction, the
    ReplicaSet's replacement starts on `node-2` and the disruption controller counts it."""
    replaced = False
    while True:
        for name in ("web-0", "web-1"):
            stored = double.read("v1", "pods", name, NAMESPACE)
            if stored is not None and stored["metadata"].get("deletionTimestamp"):
                double.delete("v1", "pods", name, NAMESPACE)
        if not replaced and any(status == 429 for _, status in evictions(journal)):
            double.seed(pod("web-2", "node-2"))
            budget = double.read("policy/v1", "poddisruptionbudgets", "web", NAMESPACE)
            assert budget is not None
            budget["status"] = budget_status(healthy=2)
            double.write(budget, manager="kube-controller-manager")
            replaced = True
        await asyncio.sleep(0.05)


async def test_kubectl_drain_evicts_through_the_budget(tmp_path: Path) -> None:
    identity = issue(["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    double = KubeDouble()
    journal = double.record_requests()
    await double.start(tls=identity)
    controllers: asyncio.Task[None] | None = None
    try:
        double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        double.seed(node("node-1"))
        double.seed(node("node-2"))
        double.seed(pod("web-0", "node-1"))
        double.seed(pod("web-1", "node-1"))
        double.seed(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": NAMESPACE, "generation": 1},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
                "status": budget_status(healthy=2),
            }
        )
        controllers = asyncio.create_task(kubelet_and_controllers(double, journal))
        kubectl = kubectl_with_flags(tmp_path, identity.ca_pem)
        drained = await kubectl.run([*flags(double, tmp_path), "drain", "node-1", "--timeout=60s"])
        cordoned = double.read("v1", "nodes", "node-1")
    finally:
        if controllers is not None:
            controllers.cancel()
            await asyncio.gather(controllers, return_exceptions=True)
        await double.stop()
    assert drained.returncode == 0, drained.stderr
    assert "node/node-1 drained" in drained.stdout
    assert cordoned is not None
    assert cordoned["spec"]["unschedulable"] is True
    assert "Cannot evict pod as it would violate the pod's disruption budget." in drained.stderr
    calls = [(e.method, e.path) for e in journal]
    cordon = calls.index(("PATCH", "/api/v1/nodes/node-1"))
    listing = next(
        i
        for i, e in enumerate(journal)
        if (e.method, e.path) == ("GET", "/api/v1/pods")
        and e.query.get("fieldSelector") == "spec.nodeName=node-1"
    )
    first_eviction = next(i for i, e in enumerate(journal) if e.path.endswith("/eviction"))
    assert cordon < listing < first_eviction
    # One pod is evicted at once; the other is refused while the budget allows no disruption,
    # then evicted on kubectl's retry once the replacement counts.
    seen = evictions(journal)
    refused = [name for name, status in seen if status == 429]
    assert refused, "the budget refused no eviction"
    assert len(set(refused)) == 1
    assert sorted(name for name, status in seen if status == 201) == ["web-0", "web-1"]
    assert seen[-1] == (refused[0], 201)
    assert not [c for c in calls if c[0] == "DELETE"], "drain deleted instead of evicting"
