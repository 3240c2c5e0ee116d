"""The descheduler's state keeps one requests map per distinct request, not one per pod."""

from __future__ import annotations

from descheduler_builders import node, pod

from hostaffinity.descheduler.state import ClusterState

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
    state.move_pod("default/web-2", "node-2")
    assert state.usage["node-1"] == {"cpu": 2000, "memory": MEMORY, "pods": 1000}
    assert state.usage["node-2"] == {"cpu": 100, "memory": MEMORY, "pods": 1000}
    assert state.requests["default/web-2"] == {"cpu": 100, "memory": MEMORY, "pods": 1000}
