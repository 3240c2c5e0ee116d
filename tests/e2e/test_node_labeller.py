"""node-labeller end to end: vcsim, a real nats-server and the Kubernetes double."""

import asyncio
import contextlib
import time
from pathlib import Path

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import (
    ANNOTATION_ESXI_HOST_NAME,
    LABEL_DATACENTER,
    LABEL_ESXI_HOST,
    LABEL_LEGACY_HOST,
    LABEL_VSPHERE_CLUSTER,
    NodeLabelled,
    NodePlaced,
    NodeUnmatched,
    VmMoved,
)
from tests.e2e.harness import default_events
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    node_object,
    relocate,
    running,
    seed_nodes,
    stream_events,
    vm_by_name,
    wait_ready,
    watching_default_collector,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

NODES = [f"node-{i}" for i in range(1, 7)]
HOSTS = ["DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"]


def expected_host(index: int) -> str:
    """vcsim places VM i (from 0) on the i-th host, round-robin."""
    return HOSTS[index % len(HOSTS)]


async def test_labels_follow_the_vm_and_are_put_back(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc = vcsim(hosts=3, vms=6)
    seed_nodes(kube_double, vc.connect(), NODES)
    kube_double.seed(node_object("not-ours", metadata={"name": "not-ours", "labels": {"a": "b"}}))
    async with running(labeller_config(vc, nats_server, kubeconfig)) as service:
        await wait_ready(service)
        for index, name in enumerate(NODES):
            labels = node_labels(kube_double, name)
            assert labels[LABEL_ESXI_HOST] == expected_host(index), name
            assert labels[LABEL_LEGACY_HOST] == expected_host(index)
            assert labels[LABEL_VSPHERE_CLUSTER] == "DC0_C0"
            assert labels[LABEL_DATACENTER] == "DC0"

        relocate(vc.connect(), "node-1", "DC0_C0_H2")
        await eventually(
            lambda: node_labels(kube_double, "node-1")[LABEL_ESXI_HOST] == "DC0_C0_H2",
            "node-1 relabelled after the vMotion",
        )
        # Events follow the label patch (KV, patch, events): wait until node-1 is done.
        await eventually(service.labeller.idle, "node-1's events published")
        moved = [e for e in await stream_events(bus) if isinstance(e, VmMoved)]
        assert [(e.node, e.from_host_name, e.to_host_name) for e in moved] == [
            ("node-1", "DC0_C0_H0", "DC0_C0_H2")
        ]

        edited = kube_double.read("v1", "nodes", "node-2")
        assert edited is not None
        edited["metadata"]["labels"][LABEL_ESXI_HOST] = "hand-edited"
        edited["metadata"]["labels"]["team"] = "storage"
        kube_double.write(edited)
        await eventually(
            lambda: node_labels(kube_double, "node-2")[LABEL_ESXI_HOST] == expected_host(1),
            "hand-edited label put back",
        )
        assert node_labels(kube_double, "node-2")["team"] == "storage"
        assert node_labels(kube_double, "not-ours") == {"a": "b"}


async def test_a_restarted_labeller_publishes_nothing_new(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc = vcsim(hosts=3, vms=6)
    seed_nodes(kube_double, vc.connect(), NODES)
    config = labeller_config(vc, nats_server, kubeconfig)
    async with running(config) as first:
        await wait_ready(first)
    events = await stream_events(bus)
    assert sorted(type(e).__name__ for e in events) == sorted(
        ["NodePlaced"] * 6 + ["NodeLabelled"] * 6
    )
    async with running(config) as second:
        await wait_ready(second)
    assert await stream_events(bus) == events


async def test_a_second_replica_takes_over(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
) -> None:
    vc = vcsim(hosts=3, vms=6)
    seed_nodes(kube_double, vc.connect(), NODES)
    config = labeller_config(vc, nats_server, kubeconfig)
    async with contextlib.AsyncExitStack() as first_replica:
        first = await first_replica.enter_async_context(running(config, "replica-a"))
        await wait_ready(first)
        async with running(config, "replica-b") as second:
            await asyncio.sleep(5 * config.lease.retry_period_seconds)
            assert second.standby, "only one replica may lead"
            await first_replica.aclose()  # replica-a stops; its Lease is given up
            started = time.monotonic()
            await eventually(lambda: not second.standby, "replica-b leads", within=10)
            assert time.monotonic() - started < config.lease.duration_seconds
            await wait_ready(second)
            relocate(vc.connect(), "node-3", "DC0_C0_H0")
            await eventually(
                lambda: node_labels(kube_double, "node-3")[LABEL_ESXI_HOST] == "DC0_C0_H0",
                "the new leader follows vMotions",
            )


async def test_bad_input_is_reported_and_never_mislabelled(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc = vcsim(
        hosts=3,
        vms=4,
        duplicate_uuid=[("node-3", "node-4")],
        rename_host={"DC0_C0_H0": "esx 01 (rack a)"},
        maintenance=["DC0_C0_H1"],
    )
    si = vc.connect()
    shared_uuid = vm_by_name(si, "node-3").config.uuid
    seed_nodes(kube_double, vc.connect(), ["node-1", "node-2"])
    kube_double.seed(node_object("ghost"))
    kube_double.seed(node_object("clone", spec={"providerID": f"vsphere://{shared_uuid}"}))
    async with running(labeller_config(vc, nats_server, kubeconfig)) as service:
        await wait_ready(service)
        events = await stream_events(bus)
        warnings = {
            (e["involvedObject"]["name"], e["reason"]) for e in await default_events(kube_double)
        }

    # A host name that is no label value: derived value, full name in the annotation, an Event.
    renamed = kube_double.read("v1", "nodes", "node-1")
    assert renamed is not None
    assert renamed["metadata"]["labels"][LABEL_ESXI_HOST].startswith("esx-01-rack-a-")
    assert renamed["metadata"]["annotations"][ANNOTATION_ESXI_HOST_NAME] == "esx 01 (rack a)"
    assert ("node-1", "EsxiHostNameNotALabelValue") in warnings
    # A host in maintenance: still labelled truthfully, and reported.
    assert node_labels(kube_double, "node-2")[LABEL_ESXI_HOST] == "DC0_C0_H1"
    assert ("node-2", "EsxiHostInMaintenance") in warnings
    # No VM matches: reported, no labels.
    assert LABEL_ESXI_HOST not in node_labels(kube_double, "ghost")
    assert ("ghost", "NodeUnmatched") in warnings
    # Two VMs share the BIOS UUID: reported with both candidates, never guessed.
    assert LABEL_ESXI_HOST not in node_labels(kube_double, "clone")
    assert ("clone", "NodeUnmatched") in warnings
    unmatched = {e.node: e for e in events if isinstance(e, NodeUnmatched)}
    assert set(unmatched) == {"ghost", "clone"}
    assert len(unmatched["clone"].candidates) == 2
    placed = {e.node for e in events if isinstance(e, NodePlaced)}
    assert placed == {"node-1", "node-2"}
    assert {e.node for e in events if isinstance(e, NodeLabelled)} == placed


async def test_a_lost_vcenter_session_is_logged_in_again_without_losing_a_change(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
) -> None:
    vc = vcsim(hosts=3, vms=6)
    seed_nodes(kube_double, vc.connect(), NODES)
    admin = vc.connect()
    manager = admin.RetrieveContent().sessionManager
    ours = {session.key for session in manager.sessionList}
    async with running(labeller_config(vc, nats_server, kubeconfig)) as service:
        await wait_ready(service)
        labeller_sessions = [s.key for s in manager.sessionList if s.key not in ours]
        assert labeller_sessions, "the labeller holds a vCenter session"
        manager.TerminateSession(labeller_sessions)
        relocate(admin, "node-5", "DC0_C0_H0")  # while the labeller's session is gone
        await eventually(
            lambda: node_labels(kube_double, "node-5")[LABEL_ESXI_HOST] == "DC0_C0_H0",
            "the move made while logged out reaches the label",
        )
        watcher = service.watcher
        assert watcher is not None
        # The move may still arrive on the call in flight; the next call fails and logs in again.
        await eventually(lambda: watcher.reconnects == 1, "the watcher logged in again")
        relocate(admin, "node-5", "DC0_C0_H1")
        await eventually(
            lambda: node_labels(kube_double, "node-5")[LABEL_ESXI_HOST] == "DC0_C0_H1",
            "the new session follows changes",
        )


async def test_another_clients_watch_on_the_default_collector_takes_no_update_from_the_labeller(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
) -> None:
    """vcsim keeps one default PropertyCollector for every session (govmomi 0.24,
    simulator/property_collector.go): a client's WaitForUpdatesEx on it drains the updates any
    other session's watch there would see. The labeller watches on collectors of its own, so a
    vMotion still reaches its labels while such a client waits (as another tool might on a real
    vCenter's session-default collector)."""
    vc = vcsim(hosts=3, vms=6)
    seed_nodes(kube_double, vc.connect(), NODES)
    admin = vc.connect()
    async with running(labeller_config(vc, nats_server, kubeconfig)) as service:
        await wait_ready(service)
        with watching_default_collector(vc.connect()):
            relocate(admin, "node-2", "DC0_C0_H0")
            await eventually(
                lambda: node_labels(kube_double, "node-2")[LABEL_ESXI_HOST] == "DC0_C0_H0",
                "the move reaches the label while another client watches",
            )
