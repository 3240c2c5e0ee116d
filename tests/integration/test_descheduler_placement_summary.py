"""The placement summary the descheduler publishes for the fleet hub: one WorkloadPlacement per
workload in `hostaffinity-placements`, written when what it says changes, deleted when the
workload goes, and not rewritten after a restart (a real nats-server holds the bucket)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from nats.js.kv import KeyValue

from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.placement_summary import PlacementSummary
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.kv_entries import live_entries
from hostaffinity.schema import (
    LABEL_FLEET_GROUP,
    PLACEMENTS_BUCKET,
    NodePlacement,
    WorkloadPlacement,
    workload_key,
)
from tests.platform.builders.descheduler import node, pod

WEB = workload_key("default", "Deployment", "web")


def placement(node_name: str, host: str, uuid: str = "vc-uuid-1") -> NodePlacement:
    return NodePlacement(
        node=node_name, vm_moid=f"vm-{node_name}", bios_uuid="", instance_uuid="",
        host_moid=f"host-{host}", host_name=f"{host}.example", host_label=host,
        cluster_moid="domain-c1", cluster_name="c1", datacenter="dc", vcenter="vc",
        observed_at="", version=1, vcenter_uuid=uuid,
    )  # fmt: skip


def replica(name: str, node_name: str, **labels: str) -> object:
    """A Deployment `web`'s pod (its ReplicaSet web-5d8f with the pod-template-hash label)."""
    return pod(
        name,
        node_name,
        {"app": "web", "pod-template-hash": "5d8f", **labels},
        owner=("ReplicaSet", "web-5d8f"),
    )


def world() -> tuple[ClusterState, PlacementSummary]:
    state = ClusterState()
    for name in ("n1", "n2", "n3"):
        state.upsert_node(node(name))
    clock = iter(datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(60))
    summary = PlacementSummary(state, "cluster-a", now=lambda: next(clock))
    summary.placement_changed("n1", placement("n1", "esx-1"))
    summary.placement_changed("n2", placement("n2", "esx-2"))
    summary.placement_changed("n3", placement("n3", "esx-1"))
    return state, summary


async def stored(kv: KeyValue) -> dict[str, WorkloadPlacement]:
    """The bucket's live keys and values."""
    return {
        key: msgspec.json.decode(value, type=WorkloadPlacement)
        for key, value in (await live_entries(kv)).items()
    }


async def test_a_workload_is_written_once_and_again_only_when_it_changes(bus: Bus) -> None:
    kv = await bus.js.key_value(PLACEMENTS_BUCKET)
    state, summary = world()
    state.upsert_pod(replica("web-a", "n1", **{LABEL_FLEET_GROUP: "payments"}))  # type: ignore[arg-type]
    state.upsert_pod(replica("web-b", "n2"))  # type: ignore[arg-type]
    state.upsert_pod(pod("agent-x", "n1", owner=("DaemonSet", "agent")))
    await summary.flush(kv)
    (web,) = (await stored(kv)).values()
    assert (await stored(kv)).keys() == {WEB}  # the DaemonSet's pod is left out
    assert web.cluster == "cluster-a"
    assert (web.kind, web.name, web.fleet_group) == ("Deployment", "web", "payments")
    assert [(r.pod, r.node, r.host_id) for r in web.replicas] == [
        ("web-a", "n1", "vc-uuid-1/host-esx-1"),
        ("web-b", "n2", "vc-uuid-1/host-esx-2"),
    ]
    assert summary.writes == 1
    # Nothing changed: nothing written, whatever the clock says.
    await summary.flush(kv)
    assert summary.writes == 1
    # A vMotion of n2's VM onto esx-1: the workload now says so.
    summary.placement_changed("n2", placement("n2", "esx-1"))
    await summary.flush(kv)
    assert summary.writes == 2
    assert {r.host_id for r in (await stored(kv))[WEB].replicas} == {"vc-uuid-1/host-esx-1"}


async def test_a_workload_that_goes_is_deleted(bus: Bus) -> None:
    kv = await bus.js.key_value(PLACEMENTS_BUCKET)
    state, summary = world()
    state.upsert_pod(replica("web-a", "n1"))  # type: ignore[arg-type]
    state.upsert_pod(replica("web-b", "n2"))  # type: ignore[arg-type]
    await summary.flush(kv)
    state.remove_pod("default/web-a")
    await summary.flush(kv)
    assert [r.pod for r in (await stored(kv))[WEB].replicas] == ["web-b"]
    state.remove_pod("default/web-b")
    await summary.flush(kv)
    assert await stored(kv) == {}
    assert summary.deletes == 1


async def test_a_restart_rewrites_nothing_and_deletes_what_went_meanwhile(bus: Bus) -> None:
    kv = await bus.js.key_value(PLACEMENTS_BUCKET)
    state, summary = world()
    state.upsert_pod(replica("web-a", "n1"))  # type: ignore[arg-type]
    state.upsert_pod(pod("db-0", "n3", {"app": "db"}, owner=("StatefulSet", "db")))
    await summary.flush(kv)
    revisions = {key: (await kv.get(key)).revision for key in await stored(kv)}
    # A new descheduler: the same pods, except db, which went while none ran.
    state, restarted = world()
    state.upsert_pod(replica("web-a", "n1"))  # type: ignore[arg-type]
    await restarted.load(kv)
    await restarted.flush(kv)
    assert restarted.writes == 0
    assert restarted.deletes == 1
    assert list(await stored(kv)) == [WEB]
    assert (await kv.get(WEB)).revision == revisions[WEB]


async def test_a_standalone_pod_counts_only_with_a_fleet_group(bus: Bus) -> None:
    kv = await bus.js.key_value(PLACEMENTS_BUCKET)
    state, summary = world()
    state.upsert_pod(pod("lonely", "n1", owner=None))
    state.upsert_pod(pod("grouped", "n2", {LABEL_FLEET_GROUP: "ha-pair"}, owner=None))
    await summary.flush(kv)
    assert list(await stored(kv)) == [workload_key("default", "Pod", "grouped")]
