"""What replicas repeat is held once: decoded pod parts, and the state's requests maps."""

from __future__ import annotations

import json

import msgspec

from hostaffinity.descheduler.core.model import DeschedulerPod, decode_pod
from hostaffinity.descheduler.core.state import ClusterState
from tests.platform.builders.descheduler import node, pod, pod_json

MEMORY = 128 * 2**20 * 1000  # 128Mi in thousandths


def test_replicas_with_equal_requests_share_one_map_and_usage_stays_exact() -> None:
    state = ClusterState()
    state.upsert_node(node("node-1"))
    for name in ("web-1", "web-2"):
        state.upsert_pod(pod(name, "node-1", {"app": "web"}))
    state.upsert_pod(pod("big-1", "node-1", {"app": "big"}, cpu="2"))
    assert state.requests["default/web-1"] is state.requests["default/web-2"]
    assert state.requests["default/big-1"] is not state.requests["default/web-1"]
    assert state.usage["node-1"] == {"cpu": 2200, "memory": 3 * MEMORY, "pods": 3000}

    state.remove_pod("default/web-1")
    state.upsert_pod(pod("web-2", "node-2", {"app": "web"}))  # rescheduled elsewhere
    assert state.usage["node-1"] == {"cpu": 2000, "memory": MEMORY, "pods": 1000}
    assert state.usage["node-2"] == {"cpu": 100, "memory": MEMORY, "pods": 1000}
    assert state.requests["default/web-2"] == {"cpu": 100, "memory": MEMORY, "pods": 1000}


def test_decoded_replicas_share_what_they_repeat_and_read_as_decoded() -> None:
    bodies = [
        json.dumps(pod_json(name, "node-1", {"app": "web"}, cpu=cpu)).encode()
        for name, cpu in (("web-1", "100m"), ("web-2", "100m"), ("web-3", "250m"))
    ]
    first, second, other = (decode_pod(body) for body in bodies)
    assert first.spec.containers is second.spec.containers
    assert first.metadata.labels is second.metadata.labels
    assert first.metadata.owner_references is second.metadata.owner_references
    assert first.spec.node_name is second.spec.node_name
    assert other.spec.containers is not first.spec.containers
    for body, decoded in zip(bodies, (first, second, other), strict=True):
        assert decoded == msgspec.json.decode(body, type=DeschedulerPod)
