"""`hostaffinity status` as the operator runs it: the CLI's own identity on the shipped 3-server
cluster, the node-labeller leading for real (its Lease, its events) against vcsim and the
Kubernetes double, the other services' Leases written as their electors write them."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest

from hostaffinity.schema import LABEL_ESXI_HOST
from hostaffinity.schema.names import ANNOTATION_READINESS
from hostaffinity.schema.readiness import decode_readiness
from tests.e2e.descheduler_harness import pod_object
from tests.e2e.harness import FAST_LEASE
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    node_object,
    running,
    wait_ready,
)
from tests.integration.cli_runner import lease, schema_of
from tests.platform.console import exit_code
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import NatsCluster
from tests.platform.vcsim import VcsimFactory


def _lease_says_ready(kube: KubeDouble) -> bool:
    lease = kube.read(
        "coordination.k8s.io/v1", "leases", "hostaffinity-node-labeller", FAST_LEASE.namespace
    )
    written = (lease or {}).get("metadata", {}).get("annotations", {}).get(ANNOTATION_READINESS)
    return written is not None and decode_readiness(written).ready


async def status(
    cluster: NatsCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str], *options: str
) -> tuple[int, str]:
    """`hostaffinity status` as the CLI's identity; returns the exit status and stdout."""
    bus = cluster.settings("cli")
    argv = ["status", "--namespace", FAST_LEASE.namespace, "--kubeconfig", str(kubeconfig)]
    argv += ["--nats", bus.servers[0], "--nats-seed", str(bus.nkey_seed_file)]
    argv += ["--nats-ca-file", str(bus.tls_ca_file), *options]
    capsys.readouterr()
    code = await asyncio.to_thread(exit_code, argv)
    return code, capsys.readouterr().out


async def test_status_healthy_then_a_service_whose_leader_is_gone(
    vcsim: VcsimFactory,
    kube_double: KubeDouble,
    nats_cluster: NatsCluster,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube = kube_double
    vc = vcsim(hosts=2, vm_names=["node1", "node2"])
    for name in ("node1", "node2"):
        kube.seed(node_object(name))
    now = datetime.now(UTC)
    kube.seed(lease("drs-translator", "drs-translator-7c9-x2", now))
    kube.seed(lease("descheduler", "descheduler-5f4-k8", now))
    config = labeller_config(vc, nats_cluster, kubeconfig)
    async with running(config, identity="node-labeller-6d8-q1") as labeller:
        await wait_ready(labeller)
        await eventually(lambda: LABEL_ESXI_HOST in node_labels(kube, "node2"), "labelled")
        # Its Lease says so from its next renewal on (status reads readiness there).
        await eventually(lambda: _lease_says_ready(kube), "the labeller's Lease says ready")
        code, out = await status(nats_cluster, kubeconfig, capsys, "-o", "json")
        report = json.loads(out)
        jsonschema.Draft202012Validator(schema_of(["status"])).validate(report)
        assert (code, report["problems"]) == (0, [])
        services = {s["service"]: s for s in report["services"]}
        labeller_view = services["node-labeller"]
        assert (labeller_view["holder"], labeller_view["live"]) == ("node-labeller-6d8-q1", True)
        assert labeller_view["last_event_type"] in ("node.placed", "node.labelled")
        assert services["descheduler"]["held_seconds"] >= 60
        assert services["scheduler-extender"]["lease"] == ""
        assert report["dlq_depth"] == 0
        assert report["exposed_workloads"] == 0
        assert {s["name"]: s["replicas"] for s in report["streams"]} == {
            "HOSTAFFINITY_EVENTS": 3, "HOSTAFFINITY_DLQ": 3,
            "KV_hostaffinity-topology": 3, "KV_hostaffinity-drs": 3,
        }  # fmt: skip
        assert all(s["leader"] and not s["lagging"] for s in report["streams"])
        code, out = await status(nats_cluster, kubeconfig, capsys)
        assert code == 0
        assert "node-labeller       node-labeller-6d8-q1" in out
        (row,) = [line for line in out.splitlines() if line.startswith("node-labeller")]
        assert " ready " in row
        assert out.rstrip().endswith("all well")
    # The labeller stopped (released its Lease); the descheduler's leader stopped renewing.
    kube.write(lease("descheduler", "descheduler-5f4-k8", now - timedelta(minutes=5)))
    # Two replicas kept apart on ESXi hosts, on the two hosts there are: no host to spare.
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": LABEL_ESXI_HOST}
    apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    for name, node in (("web-1", "node1"), ("web-2", "node2")):
        kube.write(pod_object(name, "web", node, owner="web-rs", affinity=apart))
    code, out = await status(nats_cluster, kubeconfig, capsys)
    assert code == 1
    assert "needs attention:" in out
    assert "- 1 required host-level anti-affinity rule(s) with as many replicas as usable" in out
    assert "no host to spare:\n  - default/web-1: 2 pod(s) (this one included)" in out
    assert "only 2 ESXi host(s) can take them" in out
    assert "- node-labeller has no live leader (Lease hostaffinity-node-labeller" in out
    assert "- descheduler has no live leader (Lease hostaffinity-descheduler" in out
    assert "drs-translator has no live leader" not in out
