"""The services on the bus as it ships: the 3-server TLS cluster from k8s/base/nats (R3), every
service connected as its own least-privilege nkey identity (tests/platform/nats_cluster.py).

The single-server e2e tests show what each service does; these show that it still does it when
the bus enforces `hostaffinity.cli.bus_access`, and that a server killed with -9 in the middle
of vMotions loses nothing: no label, no KV value, no `vm.moved`, no placement the descheduler
learns from the topology watch.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.layout import TOPOLOGY_STREAM
from hostaffinity.schema import (
    EVENTS_STREAM,
    LABEL_ESXI_HOST,
    DrsRulesApplied,
    ExtenderDecision,
    NodePlaced,
    PodEvicted,
    VmMoved,
    decode_event,
    event_subject,
)
from tests.e2e.descheduler_harness import (
    descheduler_config,
    node_object,
    running_descheduler,
    terminating,
    web_pod,
)
from tests.e2e.drs_harness import anti_rules, drs_config, records, running_translator, vm
from tests.e2e.labeller_harness import (
    HOSTS,
    NODES,
    LabellerParts,
    converges,
    eventually,
    node_labels,
    relocate,
    stream_events,
    vcenter_truth,
)
from tests.integration.extender_harness import ANTI, call, extender, filter_args
from tests.integration.extender_harness import pod_object as pending_pod
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import NatsCluster, ServerProcess, client_limit, connections
from tests.platform.vcsim import VcsimFactory

VMOTIONS = 20
KILL_AFTER = 5  # vMotions done before the kill -9
RESTART_AFTER = 12  # vMotions done before the killed server starts again
# A move's label may wait for a new stream leader (election, then the labeller's retry).
MOVE_LABELLED_SECONDS = 30.0
CATCH_UP_SECONDS = 30.0
MOVED = event_subject("vm.moved")
# One event type each service publishes in the first test, under its own identity.
OWN_EVENTS = {NodePlaced, ExtenderDecision, DrsRulesApplied, PodEvicted}


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float) -> None:
    """Poll server-side state (nothing to await on) until `check` holds, at most `within` s."""
    deadline = time.monotonic() + within
    while not await _answered(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.sleep(0.1)


async def _answered(check: Callable[[], Awaitable[bool]]) -> bool:
    """The check's answer; a JetStream request that timed out (a stream's leader being elected
    after a server was killed) is asked again, as any client retries."""
    try:
        return await check()
    except nats.errors.TimeoutError:
        return False


def permission_violations(cluster: NatsCluster) -> list[str]:
    """Every subject the servers refused a client: nats-server logs "Publish Violation" or
    "Subscription Violation" (older servers: "Permissions Violation for ...")."""
    return [
        f"{server.name}: {line}"
        for server in cluster.servers
        if server.log_file.exists()
        for line in server.log_file.read_text(encoding="utf-8").splitlines()
        if " Violation" in line
    ]


async def last_moved_seq(cli: Bus) -> int:
    """The stream sequence of the newest `vm.moved` (what the descheduler must have acked)."""
    return int((await cli.js.get_last_msg(EVENTS_STREAM, MOVED)).seq)


def local_stream_state(server: ServerProcess, stream: str) -> dict[str, Any]:
    """The stream's state as this one server holds it (its /jsz), not as the leader reports."""
    url = f"http://127.0.0.1:{server.monitor_port}/jsz?streams=true"
    with urllib.request.urlopen(url, timeout=2) as response:
        jsz = json.load(response)
    for account in jsz.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail["name"] == stream:
                state: dict[str, Any] = detail["state"]
                return state
    return {}


async def raft_leaders(cli: Bus) -> dict[str, str | None]:
    """Which server leads the events stream and the topology bucket (each its own Raft
    group)."""
    events = await cli.js.stream_info(EVENTS_STREAM)
    kv = await cli.js.stream_info(TOPOLOGY_STREAM)
    return {
        EVENTS_STREAM: events.cluster.leader if events.cluster else None,
        TOPOLOGY_STREAM: kv.cluster.leader if kv.cluster else None,
    }


async def caught_up(cli: Bus, cluster: NatsCluster, restarted: ServerProcess) -> bool:
    """The events stream and the topology bucket have three peers, every follower current
    with no lag, and the restarted server's own copy of the events ends where the leader's
    does."""
    events = await cli.js.stream_info(EVENTS_STREAM)
    for stream in (events, await cli.js.stream_info(TOPOLOGY_STREAM)):
        group = stream.cluster
        assert group is not None, "the stream is not clustered"
        peers = {group.leader, *(peer.name for peer in group.replicas or [])}
        in_sync = all(peer.current and not peer.lag for peer in group.replicas or [])
        if peers != {server.name for server in cluster.servers} or not in_sync:
            return False
    own = await asyncio.to_thread(local_stream_state, restarted, EVENTS_STREAM)
    return bool(own) and own.get("last_seq") == events.state.last_seq


async def test_the_services_work_on_the_shipped_cluster_each_as_its_own_identity(
    vcsim: VcsimFactory, nats_cluster: NatsCluster, kube_double: KubeDouble, kubeconfig: Path
) -> None:
    """Seed 004 on the secured cluster: what each service reads and writes there, under the
    permissions auth.conf gives its identity, is enough for it to do its job."""
    kube = kube_double
    names = ["node1", "node2", "node3"]  # vcsim: node1 on H0, node2 on H1, node3 on H2
    vc = vcsim(hosts=3, vm_names=names)
    admin = vc.connect()
    for name in names:
        kube.seed(node_object(name))
    kube.seed(web_pod("web-1", "node1"))  # required anti-affinity to app=web on the host key
    kube.seed(web_pod("web-2", "node2"))
    kube.seed(pending_pod("p3", "p3", avoid="web"))
    parts = LabellerParts(vcsim, nats_cluster, kube, kubeconfig)
    async with AsyncExitStack() as services, nats_cluster.connection("cli") as cli:
        # node-labeller: labels and the topology KV.
        labeller = await services.enter_async_context(parts.labeller(vc))
        store = await cli.topology()
        for name, host in zip(names, HOSTS, strict=True):
            assert node_labels(kube, name)[LABEL_ESXI_HOST] == host, name
            placement = await store.get_node(name)
            assert placement is not None, name
            assert placement.host_name == host, (name, placement)

        # scheduler-extender: its filter answers from that topology.
        ext = await services.enter_async_context(extender(nats_cluster, kubeconfig))
        answer = await call(ext, "filter", filter_args(kube, "p3", names))
        assert answer["NodeNames"] == ["node3"], answer
        assert sorted(answer["FailedNodes"]) == ["node1", "node2"], answer
        assert answer["FailedNodes"]["node2"].startswith(ANTI), answer
        assert answer["FailedNodes"]["node2"].endswith(f"{LABEL_ESXI_HOST}=DC0_C0_H1"), answer

        # drs-translator: one DRS anti-affinity rule for the two web VMs.
        await services.enter_async_context(
            running_translator(drs_config(vc, nats_cluster, kubeconfig))
        )
        web_vms = sorted([vm(admin, "node1"), vm(admin, "node2")])
        await eventually(
            lambda: list(anti_rules(admin).values()) == [web_vms], "the DRS rule for web", 10
        )

        # descheduler: a vMotion onto web-1's host reaches it as vm.moved; it evicts one.
        service = await services.enter_async_context(
            running_descheduler(descheduler_config(nats_cluster, kubeconfig))
        )
        await eventually(lambda: service.loop is not None and service.loop.cycles >= 1, "a cycle")
        assert terminating(kube) == []
        await asyncio.to_thread(relocate, admin, "node2", "DC0_C0_H0")
        await eventually(lambda: bool(terminating(kube)), "an eviction", within=10)
        await eventually(labeller.labeller.idle, "the labeller's events published")
        seq = await last_moved_seq(cli)
        moved = decode_event((await cli.js.get_msg(EVENTS_STREAM, seq)).data or b"")
        assert isinstance(moved, VmMoved)
        assert (moved.node, moved.from_host_name, moved.to_host_name) == (
            "node2",
            "DC0_C0_H1",
            "DC0_C0_H0",
        )
        assert len(terminating(kube)) == 1, terminating(kube)

        # Each identity published its own events and the translator wrote its bucket.
        published: set[type] = set()

        async def every_service_published() -> bool:
            published.update(type(event) for event in await stream_events(cli))
            return published >= OWN_EVENTS

        await until(every_service_published, f"an event of each type in {OWN_EVENTS}", 10)
        assert [r.vms for r in (await records(cli)).values()] == [web_vms]

        # The client limits of cluster.conf leave each service at least 4 times what it uses.
        clients = [each for server in nats_cluster.servers for each in connections(server)]
        used = {each.get("name", each["cid"]): each["subscriptions"] for each in clients}
        print(f"subscriptions per connection: {used}")
        assert max(used.values()) * 4 <= client_limit("max_subscriptions"), used
        assert len(clients) * 4 <= client_limit("max_connections"), len(clients)
    assert permission_violations(nats_cluster) == []


@pytest.mark.parametrize("victim", ["a follower", "the stream leader"])
async def test_kill_9_of_one_server_during_20_vmotions_loses_nothing(
    victim: str,
    vcsim: VcsimFactory,
    nats_cluster: NatsCluster,
    kube_double: KubeDouble,
    kubeconfig: Path,
) -> None:
    """R3 means a server may die at any moment: with quorum left, every vMotion must still be
    labelled, stored in the KV, announced exactly once and acked by the descheduler, and the
    server must rejoin and catch up."""
    parts = LabellerParts(vcsim, nats_cluster, kube_double, kubeconfig)
    vc, admin = parts.vcenter(vms=len(NODES), nodes=NODES)
    where = await asyncio.to_thread(vcenter_truth, admin)
    moves: list[tuple[str, str, str]] = []  # (node, from host, to host)
    killed: ServerProcess | None = None
    latencies: list[float] = []  # vMotion to label, per move
    async with (
        nats_cluster.connection("cli") as cli,
        parts.labeller(vc) as labeller,
        running_descheduler(descheduler_config(nats_cluster, kubeconfig)) as descheduler,
    ):
        for number in range(1, VMOTIONS + 1):
            node = NODES[(number - 1) % len(NODES)]
            target = HOSTS[(HOSTS.index(where[node]) + 1) % len(HOSTS)]
            await asyncio.to_thread(relocate, admin, node, target)
            moved_at = time.monotonic()
            moves.append((node, where[node], target))
            where[node] = target
            # Each move is stored before the next: one vm.moved per move, none coalesced.
            await eventually(
                lambda node=node, target=target: (
                    node_labels(parts.kube, node)[LABEL_ESXI_HOST] == target
                ),
                f"move {number}: {node} labelled {target}",
                within=MOVE_LABELLED_SECONDS,
            )
            latencies.append(time.monotonic() - moved_at)
            if number == KILL_AFTER:
                leaders = await raft_leaders(cli)
                names = [server.name for server in nats_cluster.servers]
                index = names.index(leaders[EVENTS_STREAM])
                if victim == "a follower":
                    index = (index + 1) % len(names)
                killed = nats_cluster.servers[index]
                print(f"kill -9 {killed.name} ({victim}); leaders: {leaders}")
                await killed.kill()
            if number == RESTART_AFTER:
                assert killed is not None
                await killed.start()
        assert killed is not None
        print("vMotion to label, s:", " ".join(f"{took:.2f}" for took in latencies))
        phase = time.monotonic()
        await eventually(labeller.labeller.idle, "the labeller's events published", 30)
        print(f"last events published {time.monotonic() - phase:.1f}s after the last label")

        # Labels and KV equal vCenter.
        assert await asyncio.to_thread(vcenter_truth, admin) == where
        await converges(parts.kube, admin, nats_cluster)

        # Every vm.moved stored exactly once.
        events = await stream_events(cli)
        repeated = {id_: n for id_, n in Counter(e.id for e in events).items() if n > 1}
        assert repeated == {}, f"events stored more than once: {repeated}"
        announced = [e for e in events if isinstance(e, VmMoved)]
        checked = [(e.id, e.node, e.from_host_name, e.to_host_name) for e in announced]
        print(f"{len(checked)} vm.moved checked:", *checked, sep="\n  ")
        stored = Counter((node, src, dst) for _, node, src, dst in checked)
        assert stored == Counter(moves), (
            f"missing {Counter(moves) - stored}, extra {stored - Counter(moves)}; ids {checked}"
        )

        # The descheduler learnt every placement from the topology watch.
        state = descheduler.state
        assert state is not None
        phase = time.monotonic()
        await eventually(
            lambda: {node: state.index.domain(node, LABEL_ESXI_HOST) for node in where} == where,
            "the descheduler's placements equal vCenter's",
            within=CATCH_UP_SECONDS,
        )
        print(f"descheduler placements current {time.monotonic() - phase:.1f}s later")

        # The killed server is back and holds what the others hold.
        started = time.monotonic()
        await until(
            lambda: caught_up(cli, nats_cluster, killed),
            f"{killed.name} caught up",
            within=CATCH_UP_SECONDS,
        )
        print(f"{killed.name} caught up {time.monotonic() - started:.1f}s after the checks")
    assert permission_violations(nats_cluster) == []
