"""`hostaffinity explain pod|node` against vcsim, the node-labeller placing the nodes, the
descheduler evicting for real, the Kubernetes double and a real nats-server.

vcsim puts VM i on host i mod 3: node1 and node4 share DC0_C0_H0. Three `web` replicas keep
apart on ESXi hosts (one per host), so a fourth stays Pending, refused on every node by the
replica on that node's host; two `api` replicas were placed on the shared host, so the
descheduler evicts one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import (
    EVENTS_STREAM,
    LABEL_ESXI_HOST,
    ExtenderDecision,
    event_id,
    event_subject,
    utc_timestamp,
)
from tests.e2e.descheduler_harness import (
    descheduler_config,
    eventually,
    node_object,
    pod_object,
    running_descheduler,
    terminating,
)
from tests.e2e.labeller_harness import labeller_config, node_labels, running, wait_ready
from tests.integration.cli_runner import Cli
from tests.platform.console import exit_code
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.nats_cluster import connected
from tests.platform.vcsim import VcsimFactory

NODES = ("node1", "node2", "node3", "node4")
ANTI_WEB_RULE = f"{{app=web}} in namespaces [default] on topology key {LABEL_ESXI_HOST}"


def apart(app: str) -> dict[str, Any]:
    """Required anti-affinity of the app's replicas on the ESXi host."""
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": LABEL_ESXI_HOST}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def replica(name: str, app: str, node: str) -> dict[str, Any]:
    return pod_object(name, app, node, owner=f"{app}-rs", affinity=apart(app))


Scenario = Callable[[], contextlib.AbstractAsyncContextManager[str]]


EVICTED = event_subject("pod.evicted")


@pytest.fixture
def scenario(
    vcsim: VcsimFactory, kube_double: KubeDouble, nats_server: NatsServer, kubeconfig: Path
) -> Scenario:
    """`async with scenario() as evicted:` the cluster above, placed, with the evicted pod."""
    return functools.partial(_scenario, vcsim, kube_double, nats_server, kubeconfig)


@contextlib.asynccontextmanager
async def _scenario(
    vcsim: VcsimFactory, kube: KubeDouble, nats: NatsServer, kubeconfig: Path
) -> AsyncIterator[str]:
    vc = vcsim(hosts=3, vm_names=list(NODES))
    for name in NODES:
        kube.seed(node_object(name))
    for index, node in enumerate(("node1", "node2", "node3"), start=1):
        kube.seed(replica(f"web-{index}", "web", node))
    kube.seed(replica("web-4", "web", ""))  # Pending
    kube.seed(replica("api-1", "api", "node1"))
    kube.seed(replica("api-2", "api", "node4"))
    kube.seed(pod_object("plain", "plain", "node3", owner="plain-rs", affinity=None))
    async with running(labeller_config(vc, nats, kubeconfig)) as labeller:
        await wait_ready(labeller)
        await eventually(
            lambda: all(LABEL_ESXI_HOST in node_labels(kube, n) for n in NODES), "nodes labelled"
        )
        async with running_descheduler(descheduler_config(nats, kubeconfig)):
            await eventually(lambda: bool(terminating(kube)), "an api replica evicted")
            # pod.evicted leaves the descheduler's outbox a moment after the eviction: stop the
            # descheduler only once the stream has it.
            async with connected(nats.settings()) as bus:
                for _ in range(100):
                    info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=EVICTED)
                    if info.state.subjects:
                        break
                    await asyncio.sleep(0.1)
        [evicted] = terminating(kube)
        yield evicted


async def test_explain_a_placed_pod_where_it_runs_and_its_rule_holding(
    scenario: Scenario, cli: Cli
) -> None:
    async with scenario():
        code, report = await cli.json("explain", "pod", "default/web-1")
        assert code == 0
        assert report["concerned"] is True
        assert report["location"] == {
            "node": "node1",
            "vm_moid": report["location"]["vm_moid"],
            "esxi_host": "DC0_C0_H0",
            "host_label": "DC0_C0_H0",
            "cluster": "DC0_C0",
            "datacenter": "DC0",
            "vcenter": "",  # one vCenter: hosts are named bare
        }
        assert report["location"]["vm_moid"].startswith("vm-")
        own = [t for t in report["terms"] if t["owner"] == "default/web-1"]
        assert [(t["kind"], t["rule"], t["host_level"], t["state"]) for t in own] == [
            ("required anti-affinity", ANTI_WEB_RULE, True, "holds")
        ]
        # web-2 and web-3 carry the same rule; it selects web-1 and holds too (other hosts).
        others = {t["owner"]: t["state"] for t in report["terms"] if t["owner"] != "default/web-1"}
        assert others == {"default/web-2": "holds", "default/web-3": "holds"}
        code, out, _ = await cli("explain", "pod", "default/web-1")
        assert "on ESXi host DC0_C0_H0 (cluster DC0_C0, datacenter DC0)" in out
        assert f"[holds] required anti-affinity (host-level): {ANTI_WEB_RULE}" in out


async def test_explain_a_pending_pod_names_the_rule_and_the_pod_refusing_it_per_host(
    scenario: Scenario, cli: Cli, bus: Bus
) -> None:
    async with scenario():
        decided = utc_timestamp()
        await bus.publish_event(
            ExtenderDecision(
                id=event_id("extender.decision", "web-4", decided), occurred_at=decided,
                source="scheduler-extender", verb="filter", pod="default/web-4",
                pod_uid="uid-unknown", outcome="unschedulable", nodes_asked=4,
                rejections={"node(s) didn't match pod anti-affinity rules": 4},
            )
        )  # fmt: skip
        code, report = await cli.json("explain", "pod", "default/web-4")
        assert code == 0
        assert (report["phase"], report["location"]["node"]) == ("Pending", "")
        assert report["feasible_nodes"] == []
        assert report["summary"] == (
            "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules."
        )
        by_host = {r["host"]: (r["nodes"], r["message"]) for r in report["refusals"]}
        assert sorted(by_host) == ["DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"]
        nodes, message = by_host["DC0_C0_H0"]
        assert nodes == ["node1", "node4"]
        assert message.startswith("pod default/web-1 (on node node1) matches the pod's required")
        assert f"{ANTI_WEB_RULE} and is in the node's domain {LABEL_ESXI_HOST}=DC0_C0_H0" in message
        assert by_host["DC0_C0_H1"][1].startswith("pod default/web-2 (on node node2)")
        assert [(h["type"], h["at"]) for h in report["history"]] == [("extender.decision", decided)]
        # Three web replicas run on the three hosts: this fourth one has no host to spare.
        [headroom] = report["host_headroom"]
        expected = "4 pod(s) (this one included) are selected by its required anti-affinity "
        assert headroom.startswith(f"{expected}{ANTI_WEB_RULE}, and only 3 ESXi host(s)")
        code, out, _ = await cli("explain", "pod", "default/web-4")
        assert "DC0_C0_H0  node1, node4  pod default/web-1 (on node node1)" in out
        assert "extender filter: unschedulable, 0/4 nodes passed" in out
        assert "no host to spare: 4 pod(s)" in out


async def test_explain_an_evicted_pod_names_the_strategy_and_the_moment(
    scenario: Scenario, cli: Cli
) -> None:
    async with scenario() as evicted:
        code, report = await cli.json("explain", "pod", f"default/{evicted}")
        assert code == 0
        assert report["phase"] == "Running, terminating"
        [own] = [t for t in report["terms"] if t["owner"] == f"default/{evicted}"]
        assert own["state"] == "violated"  # still on the shared host until it is gone
        [entry] = report["history"]
        assert entry["type"] == "pod.evicted"
        assert entry["source"] == "descheduler"
        assert entry["summary"].startswith(
            "evicted from node node" if evicted == "api-1" else "evicted from node node4"
        )
        assert "by RemovePodsViolatingInterPodAntiAffinity" in entry["summary"]
        assert entry["at"].endswith("Z")
        _, out, _ = await cli("explain", "pod", f"default/{evicted}")
        assert f"{entry['at']}  pod.evicted  evicted from node" in out


async def test_explain_a_pod_no_rule_concerns_says_so(scenario: Scenario, cli: Cli) -> None:
    async with scenario():
        code, report = await cli.json("explain", "pod", "default/plain")
        assert (code, report["concerned"], report["terms"], report["history"]) == (0, False, [], [])
        code, out, err = await cli("explain", "pod", "default/plain")
        assert code == 0
        assert out.startswith("pod default/plain (Running) on node node3")
        assert "no hostaffinity rule concerns it" in out
        assert "Traceback" not in err


async def test_explain_a_node_its_host_its_pods_rules_and_its_history(
    scenario: Scenario, cli: Cli
) -> None:
    async with scenario():
        code, report = await cli.json("explain", "node", "node4")
        assert code == 0
        assert (report["location"]["esxi_host"], report["host_peers"]) == ("DC0_C0_H0", ["node1"])
        assert report["host_state"] == "connected"
        assert {h["type"] for h in report["history"]} >= {"node.placed", "node.labelled"}


async def test_explain_what_does_not_exist_or_cannot_be_read_is_a_clear_error(
    kube_double: KubeDouble, kubeconfig: Path, cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await cli("explain", "pod", "default/nope")
    assert (code, out) == (1, "")
    assert err == (
        "hostaffinity explain pod: pod default/nope does not exist "
        "(`kubectl get pods -n default` lists the ones that do)\n"
    )
    code, _, err = await cli("explain", "node", "nope")
    assert code == 1
    # Looked up before the snapshot is read: no progress lines before it.
    assert err == (
        "hostaffinity explain node: node nope does not exist (`kubectl get nodes` lists the ones "
        "that do)\n"
    )

    kube_double.seed(replica("web-1", "web", "node1"))
    argv = ["explain", "pod", "default/web-1", "--kubeconfig", str(kubeconfig)]
    argv += ["--nats", "nats://127.0.0.1:9", "--timeout", "1"]
    code = await asyncio.to_thread(exit_code, argv)
    err = capsys.readouterr().err
    assert code == 1
    assert "could not read the cluster and the topology KV within 1 s" in err
    assert "Traceback" not in err
