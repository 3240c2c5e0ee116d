"""The HA audit end to end: vcsim (3 hosts, one node VM each), the real node-labeller and
drs-translator, a real nats-server and the Kubernetes double; vSphere HA set on the cluster by
ReconfigureComputeResource_Task as an administrator does; then `hostaffinity what-if
host-failure`, `status` and `explain pod`.

Three replicas apart on the ESXi host make the drs-translator write one anti-affinity rule over
the three VMs: with HA respecting VM-VM anti-affinity, the VM of a failed host has no host left.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.errors import KeyNotFoundError
from pyVmomi import vim

from hostaffinity.drs_translator.config import HaAuditSettings
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import DRS_BUCKET, LABEL_ESXI_HOST, ClusterHaSettings, drs_ha_key
from tests.e2e.drs_harness import (
    anti_rules,
    cluster_of,
    drs_config,
    pod_manifest,
    reconfigure,
    running_translator,
    vm,
)
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_labels,
    node_object,
    running,
    wait_ready,
)
from tests.integration.cli_runner import Cli
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import Vcsim, VcsimFactory

NODES = ["node-1", "node-2", "node-3"]  # vcsim puts node-i on DC0_C0_H<i-1>
WEB = {"app": "web"}
ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "pods": "110"}
_vim: Any = vim


def ha_spec(*, enabled: bool, respect: str | None) -> Any:
    """An administrator's HA settings: admission control for one host failure, and the
    das.respectVmVmAntiAffinityRules advanced option when `respect` is given."""
    options = (
        []
        if respect is None
        else [_vim.option.OptionValue(key="das.respectVmVmAntiAffinityRules", value=respect)]
    )
    return _vim.cluster.ConfigSpecEx(
        dasConfig=_vim.cluster.DasConfigInfo(
            enabled=enabled,
            admissionControlEnabled=True,
            admissionControlPolicy=_vim.cluster.FailoverLevelAdmissionControlPolicy(
                failoverLevel=1
            ),
            option=options,
        )
    )


async def recorded_ha(bus: Bus, cluster: str, within: float = 20.0) -> ClusterHaSettings:
    """The drs-translator's record of the cluster's HA, once it says HA is on."""
    kv = await bus.js.key_value(DRS_BUCKET)
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(KeyNotFoundError):
            entry = await kv.get(drs_ha_key("vcsim", cluster))
            settings = msgspec.json.decode(entry.value or b"", type=ClusterHaSettings)
            if settings.enabled:
                return settings
        if time.monotonic() > deadline:
            raise AssertionError(f"no HA record saying HA is on for {cluster}")
        await asyncio.sleep(0.1)


async def ha_record_exists(kv: Any, cluster: str) -> bool:
    try:
        await kv.get(drs_ha_key("vcsim", cluster))
    except KeyNotFoundError:
        return False
    return True


@contextlib.asynccontextmanager
async def anti_affine_web(
    vc: Vcsim, kube: KubeDouble, nats: NatsServer, kubeconfig: Path
) -> AsyncIterator[dict[str, list[str]]]:
    """Labeller and translator running, three replicas kept apart on hosts: yields our DRS
    anti-affinity rules in vcsim (name → VM moids) once there is one."""
    for index, node in enumerate(NODES, start=1):
        kube.seed(node_object(node, status={"allocatable": ALLOCATABLE}))
        kube.seed(pod_manifest(f"web-{index}", node, WEB, apart_from=WEB))
    si = vc.connect()
    fast = HaAuditSettings(refresh_seconds=0.2)
    async with running(labeller_config(vc, nats, kubeconfig)) as labeller:
        await wait_ready(labeller)
        await eventually(
            lambda: all(LABEL_ESXI_HOST in node_labels(kube, n) for n in NODES), "nodes labelled"
        )
        async with running_translator(drs_config(vc, nats, kubeconfig, ha_audit=fast)):
            await eventually(lambda: bool(anti_rules(si)), "the DRS anti-affinity rule", 20)
            yield anti_rules(si)


@pytest.mark.parametrize(
    ("enabled", "respect", "stranded"),
    [
        pytest.param(True, "true", True, id="ha-respects-rules"),
        pytest.param(True, "false", False, id="ha-breaks-rules"),
        pytest.param(False, "true", False, id="ha-off"),
    ],
)
async def test_what_if_host_failure_names_the_vm_ha_could_not_restart(
    vcsim: VcsimFactory,
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    bus: Bus,
    cli: Cli,
    enabled: bool,
    respect: str,
    stranded: bool,
) -> None:
    vc = vcsim(hosts=3, vm_names=NODES)
    si = vc.connect()
    cluster = str(cluster_of(si)._moId)
    # HA is on (recorded first) even in the ha-off case, then switched off: the record follows.
    reconfigure(si, ha_spec(enabled=True, respect=respect))
    async with anti_affine_web(vc, kube_double, nats_server, kubeconfig) as rules:
        ((rule, vms),) = rules.items()
        assert vms == sorted(vm(si, n) for n in NODES)
        recorded = await recorded_ha(bus, cluster)
        assert (recorded.admission_control_policy, recorded.failover_level) == ("host-failures", 1)
        assert recorded.respects_vm_anti_affinity is (respect == "true")
        if not enabled:
            reconfigure(si, ha_spec(enabled=False, respect=None))
            kv = await bus.js.key_value(DRS_BUCKET)
            await asyncio.sleep(1.0)  # several refreshes
            entry = await kv.get(drs_ha_key("vcsim", cluster))
            assert msgspec.json.decode(entry.value or b"", type=ClusterHaSettings).enabled is False

        code, report = await cli.json("what-if", "host-failure", "DC0_C0_H0")
        assert code == 1  # web-1 has nowhere to go either way: two hosts left, two replicas
        assert report["exposed"]["nodes"] == ["node-1"]
        assert [m["pod"] for m in report["exposed"]["moves"]] == ["default/web-1"]
        [ha] = report["ha"]
        assert (ha["cluster_moid"], ha["enabled"], report["ha_unknown"]) == (cluster, enabled, [])
        expected = [
            {
                "vm_moid": vm(si, "node-1"),
                "node": "node-1",
                "host": "DC0_C0_H0",
                "cluster_moid": cluster,
                "rule": rule,
                "pods": ["default/web-1", "default/web-2", "default/web-3"],
                "hosts_left": ["DC0_C0_H1", "DC0_C0_H2"],
            }
        ]
        assert report["unrestartable"] == (expected if stranded else [])

        code, out, _ = await cli("what-if", "host-failure", "DC0_C0_H0")
        assert code == 1
        said = f"VM {vm(si, 'node-1')} (node node-1): DRS rule {rule} keeps it from every"
        assert (said in out) is stranded
        assert ("1 node VM(s) vSphere HA could not restart" in out) is stranded

        _, status = await cli.json("status")
        assert len(status["ha_unrestartable"]) == int(stranded)
        assert any("vSphere HA" in p for p in status["problems"]) is stranded
        _, explained = await cli.json("explain", "pod", "default/web-2")
        assert len(explained["ha_failover"]) == int(stranded)
        if stranded:
            assert rule in status["ha_unrestartable"][0]
            assert "DC0_C0_H1" in explained["ha_failover"][0]


async def test_what_if_host_failure_of_an_unknown_host_is_an_error(cli: Cli) -> None:
    code, _, err = await cli("what-if", "host-failure", "no-such-host")
    assert code == 1
    assert "no ESXi host named no-such-host" in err


async def test_the_ha_record_goes_when_the_cluster_holds_no_rule_of_ours(
    vcsim: VcsimFactory,
    kube_double: KubeDouble,
    nats_server: NatsServer,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc = vcsim(hosts=3, vm_names=NODES)
    si = vc.connect()
    cluster = str(cluster_of(si)._moId)
    reconfigure(si, ha_spec(enabled=True, respect=None))
    async with anti_affine_web(vc, kube_double, nats_server, kubeconfig):
        recorded = await recorded_ha(bus, cluster)
        assert (recorded.respect_option, recorded.respects_vm_anti_affinity) == ("", True)
        for index in range(1, len(NODES) + 1):
            kube_double.delete("v1", "pods", f"web-{index}", "default")
        await eventually(lambda: not anti_rules(si), "our rule removed", 20)
        kv = await bus.js.key_value(DRS_BUCKET)
        deadline = time.monotonic() + 10
        while await ha_record_exists(kv, cluster):
            assert time.monotonic() < deadline, "the HA record outlived the cluster's last rule"
            await asyncio.sleep(0.1)
