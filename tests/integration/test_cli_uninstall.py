"""`hostaffinity uninstall`: our DRS rules and groups (prefix and ownership record), our node
labels and annotations and our bus state go; an administrator's DRS rule, a rule with our
prefix but no record, and other labels stay. Against vcsim, the Kubernetes double and the
shipped 3-server NATS cluster, as the `provision` identity; `--dry-run` changes nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.errors import NotFoundError
from pyVmomi import vim

from hostaffinity.cli.bus_access import OUR_STREAMS
from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM
from hostaffinity.schema import (
    ANNOTATION_FAILURE_DOMAIN_LABELS,
    DRS_BUCKET,
    LABEL_ESXI_HOST,
    LABEL_LEGACY_HOST,
    LABEL_ZONE,
    DrsOwnership,
    drs_rule_key,
)
from tests.e2e.descheduler_harness import node_object
from tests.e2e.drs_harness import cluster_of, drs_state, reconfigure
from tests.e2e.harness import FAST_LEASE
from tests.integration.cli_runner import lease
from tests.platform.console import exit_code
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import NatsCluster
from tests.platform.vcsim import VcsimFactory

NODES = ["node1", "node2", "node3"]
VCENTER = "vcenter"
OURS = "hostaffinity-anti-0123456789ab"
OUR_VM_GROUP = "hostaffinity-vmgroup-0123456789ab"
OUR_HOST_GROUP = "hostaffinity-hostgroup-0123456789ab"
OUR_VM_HOST = "hostaffinity-vmhost-0123456789ab"
UNRECORDED = "hostaffinity-anti-ffffffffffff"  # our prefix, no ownership record
ADMINS = "admin-keep-apart"
_vim: Any = vim

# Every stream of ours but the fleet view's mirror: this bus is not in a fleet.
PROVISIONED = set(OUR_STREAMS) - {FLEET_STREAM}


def vm(si: vim.ServiceInstance, name: str) -> Any:
    (found,) = [v for v in cluster_of(si).resourcePool.vm if v.name == name]
    return found


def seed_vcenter(si: vim.ServiceInstance) -> str:
    """Our four objects, an administrator's rule and an unrecorded one; the cluster's moid."""
    cluster = cluster_of(si)
    node1, node2, node3 = (vm(si, n) for n in NODES)
    reconfigure(
        si,
        _vim.cluster.ConfigSpecEx(
            groupSpec=[
                _vim.cluster.GroupSpec(
                    operation="add", info=_vim.cluster.VmGroup(name=OUR_VM_GROUP, vm=[node3])
                ),
                _vim.cluster.GroupSpec(
                    operation="add",
                    info=_vim.cluster.HostGroup(name=OUR_HOST_GROUP, host=[cluster.host[0]]),
                ),
            ]
        ),
    )
    rules = [
        _vim.cluster.AntiAffinityRuleSpec(name=OURS, enabled=True, vm=[node1, node2]),
        _vim.cluster.AntiAffinityRuleSpec(name=UNRECORDED, enabled=True, vm=[node1, node3]),
        _vim.cluster.AntiAffinityRuleSpec(name=ADMINS, enabled=True, vm=[node2, node3]),
        _vim.cluster.VmHostRuleInfo(
            name=OUR_VM_HOST,
            enabled=True,
            mandatory=False,
            vmGroupName=OUR_VM_GROUP,
            affineHostGroupName=OUR_HOST_GROUP,
        ),
    ]
    reconfigure(
        si,
        _vim.cluster.ConfigSpecEx(
            rulesSpec=[_vim.cluster.RuleSpec(operation="add", info=r) for r in rules]
        ),
    )
    moid: str = cluster._moId
    return moid


async def record_ownership(nats: NatsCluster, cluster: str) -> None:
    """The records the drs-translator would have written for our four objects."""
    kinds = {
        OURS: "vm-anti-affinity",
        OUR_VM_GROUP: "vm-group",
        OUR_HOST_GROUP: "host-group",
        OUR_VM_HOST: "vm-host",
    }
    async with nats.connection("drs-translator") as bus:
        kv = await bus.js.key_value(DRS_BUCKET)
        for name, kind in kinds.items():
            record = DrsOwnership(
                vcenter=VCENTER,
                cluster_moid=cluster,
                name=name,
                kind=kind,  # type: ignore[arg-type]
                state="applied",
                applied_at=datetime.now(UTC).isoformat(),
            )
            await kv.put(drs_rule_key(VCENTER, cluster, name), msgspec.json.encode(record))


def seed_nodes(kube: KubeDouble) -> None:
    for index, name in enumerate(NODES):
        node = node_object(name, {LABEL_ESXI_HOST: f"h{index}", LABEL_LEGACY_HOST: f"h{index}"})
        node["metadata"]["labels"]["team"] = "payments"
        node["metadata"]["annotations"] = {"hostaffinity.io/vm": f"vm-{index}", "other.io/x": "y"}
        # A zone the node-labeller set (listed in its annotation), and one the cloud provider set.
        node["metadata"]["labels"][LABEL_ZONE] = f"zone-{index}"
        if index == 0:
            node["metadata"]["annotations"][ANNOTATION_FAILURE_DOMAIN_LABELS] = LABEL_ZONE
        kube.seed(node)


def node_metadata(kube: KubeDouble, name: str) -> dict[str, Any]:
    (node,) = [n for n in kube.store.objects("nodes", None) if n["metadata"]["name"] == name]
    metadata: dict[str, Any] = node["metadata"]
    return metadata


async def streams_left(nats: NatsCluster) -> set[str]:
    async with nats.connection("provision") as bus:
        left = set()
        for stream in OUR_STREAMS:
            try:
                await bus.js.stream_info(stream)
            except NotFoundError:
                continue
            left.add(stream)
        return left


def uninstall_argv(nats: NatsCluster, kubeconfig: Path, *more: str) -> list[str]:
    """`hostaffinity uninstall` against the double and the cluster, as `provision`."""
    settings = nats.settings("provision")
    return [
        "uninstall",
        "--namespace", FAST_LEASE.namespace,
        "--kubeconfig", str(kubeconfig),
        "--nats", settings.servers[0],
        "--nats-seed", str(settings.nkey_seed_file),
        "--nats-ca-file", str(settings.tls_ca_file),
        *more,
    ]  # fmt: skip


async def test_uninstall_removes_ours_and_nothing_else(
    vcsim: VcsimFactory,
    nats_cluster: NatsCluster,
    kube_double: KubeDouble,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    vc = vcsim(hosts=3, vm_names=NODES)
    si = vc.connect()
    cluster = seed_vcenter(si)
    await record_ownership(nats_cluster, cluster)
    seed_nodes(kube_double)
    argv = uninstall_argv(nats_cluster, kubeconfig, "--vcenter", vc.url, "--legacy-host-label")
    before = drs_state(si)

    assert await asyncio.to_thread(exit_code, [*argv, "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"would remove DRS rule {OURS} (cluster {cluster})" in said
    assert f"would remove DRS group {OUR_HOST_GROUP} (cluster {cluster})" in said
    assert f"left rule {UNRECORDED}: our prefix, but no ownership record" in said
    assert "would delete bus stream KV_hostaffinity-drs" in said
    assert ADMINS not in said
    assert drs_state(si) == before
    assert await streams_left(nats_cluster) == PROVISIONED
    assert LABEL_ESXI_HOST in node_metadata(kube_double, "node1")["labels"]

    assert await asyncio.to_thread(exit_code, argv) == 0
    said = capsys.readouterr().out
    assert f"removed DRS rule {OUR_VM_HOST} (cluster {cluster})" in said
    assert sorted(drs_state(si)) == [f"rule:{ADMINS}", f"rule:{UNRECORDED}"]
    for name in NODES:
        metadata = node_metadata(kube_double, name)
        assert not [k for k in metadata["labels"] if k.startswith("hostaffinity.io/")]
        assert LABEL_LEGACY_HOST not in metadata["labels"]
        assert metadata["labels"]["team"] == "payments"
        assert metadata["annotations"] == {"other.io/x": "y"}
    assert LABEL_ZONE not in node_metadata(kube_double, NODES[0])["labels"]
    assert all(node_metadata(kube_double, n)["labels"][LABEL_ZONE] for n in NODES[1:])
    assert await streams_left(nats_cluster) == set()


async def test_it_waits_for_the_services_to_stop_and_keeps_a_legacy_label_not_ours(
    nats_cluster: NatsCluster,
    kube_double: KubeDouble,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A live Lease (the node-labeller would label again): refused, and a dry run says so. Once
    it expired, without --legacy-host-label (and with no records, no vCenter is needed)."""
    seed_nodes(kube_double)
    now = datetime.now(UTC)
    kube_double.write(lease("node-labeller", "node-labeller-7c9-x2", now))
    argv = uninstall_argv(nats_cluster, kubeconfig)
    assert await asyncio.to_thread(exit_code, [*argv, "--dry-run"]) == 0
    assert "note: node-labeller still running" in capsys.readouterr().out
    assert await asyncio.to_thread(exit_code, argv) == 1
    said = capsys.readouterr()
    assert "node-labeller still running" in said.err
    assert "nothing was changed" in said.err
    assert LABEL_ESXI_HOST in node_metadata(kube_double, "node1")["labels"]
    assert await streams_left(nats_cluster) == PROVISIONED

    kube_double.write(lease("node-labeller", "node-labeller-7c9-x2", now - timedelta(minutes=5)))
    assert await asyncio.to_thread(exit_code, argv) == 0
    assert f"no DRS ownership records for vCenter '{VCENTER}'" in capsys.readouterr().out
    for name in NODES:
        labels = node_metadata(kube_double, name)["labels"]
        assert LABEL_ESXI_HOST not in labels
        assert LABEL_LEGACY_HOST in labels
    assert await streams_left(nats_cluster) == set()
