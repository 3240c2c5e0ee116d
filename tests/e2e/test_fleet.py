"""Three Kubernetes clusters on one vCenter, each with its own hostaffinity (API double, the
shipped three-server bus joined as a leaf node of a three-server fleet hub, node-labeller and
descheduler), all on the same ESXi hosts, each running `web` in fleet group `payments`.

What must hold: every install's summary (written by its descheduler from what its labeller
placed) reaches every install's mirror of the fleet view; `hostaffinity fleet what-if
host-failure` names every cluster's losses; with the hub killed each install labels and
deschedules alone (a vMotion is labelled, the replicas it piled on one host are spread again),
and when the hub returns the view converges, each revision sourced once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pyVmomi import vim

from hostaffinity.cli.main import main
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.process.config import ClusterSettings, SharedSettings
from hostaffinity.schema import (
    FLEET_BUCKET,
    LABEL_ESXI_HOST,
    LABEL_FLEET_GROUP,
    PLACEMENTS_BUCKET,
    WorkloadPlacement,
    fleet_key,
    label_value,
    workload_key,
)
from tests.e2e.descheduler_harness import (
    descheduler_config,
    node_object,
    pod_object,
    running_descheduler,
    terminating,
)
from tests.e2e.harness import eventually
from tests.e2e.labeller_harness import labeller_config, relocate, running, vm_by_name
from tests.integration.test_fleet_hub import held, once_each, sourced, until, view
from tests.platform.fleet_hub import FleetHub
from tests.platform.kube_double import KubeDouble
from tests.platform.nats_cluster import NatsCluster
from tests.platform.vcsim import Vcsim, VcsimFactory

WEB = workload_key("default", "Deployment", "web")
APART = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": LABEL_ESXI_HOST}
        ]
    }
}


@dataclass
class Install:
    name: str
    nodes: list[str]
    kube: KubeDouble
    bus: NatsCluster


def web_replica(index: int, node: str) -> dict[str, Any]:
    """`web`'s replica (its ReplicaSet web-5d8f), kept off the other's ESXi host, in `payments`."""
    pod = pod_object(f"web-{index}", "web", node, owner="web-5d8f", affinity=APART)
    pod["metadata"]["labels"] |= {"pod-template-hash": "5d8f", LABEL_FLEET_GROUP: "payments"}
    return pod


def host_of(si: vim.ServiceInstance, vm_name: str) -> str:
    return str(vm_by_name(si, vm_name).runtime.host.name)


@contextlib.asynccontextmanager
async def running_install(install: Install, vc: Vcsim, workdir: Path) -> AsyncIterator[None]:
    """Its labeller and descheduler, as main() runs them, with its cluster name."""
    shared = SharedSettings(cluster=ClusterSettings(name=install.name))
    kubeconfig = install.kube.write_kubeconfig(workdir / f"{install.name}.kubeconfig")
    labeller = labeller_config(vc, install.bus, kubeconfig, shared=shared)
    descheduler = msgspec.structs.replace(
        descheduler_config(install.bus, kubeconfig, debounce_seconds=0.2), shared=shared
    )
    async with (
        running(labeller, f"{install.name}-labeller"),
        running_descheduler(descheduler, f"{install.name}-descheduler"),
    ):
        yield


async def summary_on(bus: Bus, bucket: str, key: str) -> WorkloadPlacement | None:
    kv = await bus.js.key_value(bucket)
    with contextlib.suppress(Exception):
        entry = await kv.get(key)
        return msgspec.json.decode(entry.value or b"", type=WorkloadPlacement)
    return None


async def test_three_installs_share_one_view_and_work_alone_without_the_hub(
    vcsim: VcsimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vc = vcsim(hosts=3, vms=9)
    si = vc.connect()
    hub = FleetHub(tmp_path / "hub")
    installs = []
    # vcsim puts node-i on host (i-1) mod 3: each cluster has one node on every host.
    for index, name in enumerate(("alpha", "beta", "gamma")):
        nodes = [f"node-{3 * index + i}" for i in (1, 2, 3)]
        installs.append(Install(name, nodes, KubeDouble(), hub.join(name, name, tmp_path / name)))
    async with contextlib.AsyncExitStack() as stack:
        await hub.start()
        stack.push_async_callback(hub.stop)
        for install in installs:
            await install.kube.start()
            stack.push_async_callback(install.kube.stop)
            await install.bus.start()
            stack.push_async_callback(install.bus.stop)
            await install.bus.provision()
            for node in install.nodes:
                install.kube.seed(node_object(node))
            install.kube.seed(web_replica(0, install.nodes[0]))
            install.kube.seed(web_replica(1, install.nodes[1]))
        await hub.provision()
        for install in installs:
            await stack.enter_async_context(running_install(install, vc, tmp_path))
        alpha = installs[0]
        wanted = {fleet_key(install.name, WEB) for install in installs}

        async def every_summary_placed(bus: Bus) -> bool:
            seen = await view(bus)
            if not wanted <= set(seen):
                return False
            decoded = [msgspec.json.decode(seen[k], type=WorkloadPlacement) for k in wanted]
            return all(r.host_id for d in decoded for r in d.replicas)

        async with alpha.bus.connection("cli") as alpha_bus:
            await until(lambda: every_summary_placed(alpha_bus), "alpha never saw every summary")
            web = await summary_on(alpha_bus, FLEET_BUCKET, fleet_key("beta", WEB))
        assert web is not None
        assert (web.cluster, web.fleet_group, [r.pod for r in web.replicas]) == (
            "beta",
            "payments",
            ["web-0", "web-1"],
        )

        # What a failure of node-1's host costs every cluster: one node and one web replica
        # each, and the fleet group in all three.
        settings = alpha.bus.settings("cli")
        argv = [
            "--nats", settings.servers[0], "--nats-seed", str(settings.nkey_seed_file),
            "--nats-ca-file", str(settings.tls_ca_file),
        ]  # fmt: skip
        first_host = host_of(si, "node-1")
        with pytest.raises(SystemExit) as done:
            await asyncio.to_thread(main, ["fleet", "what-if", "host-failure", first_host, *argv])
        assert done.value.code == 0
        printed = capsys.readouterr().out
        assert ": 3 clusters affected" in printed
        for install in installs:
            assert f"{install.name}: 1 nodes lost: {install.nodes[0]}" in printed
        assert printed.count("default/Deployment/web: 1 of 2 replicas") == 3
        assert printed.count("fleet groups hit: payments") == 3

        # The hub goes. alpha's node-2 is moved onto node-1's host: alpha labels it, its
        # descheduler sees web's replicas piled there and evicts one, and its summary says so,
        # all without the hub.
        for server in hub.servers:
            await server.kill()
        relocate(si, "node-2", first_host)
        await eventually(
            lambda: alpha.kube.read("v1", "nodes", "node-2")["metadata"]["labels"].get(
                LABEL_ESXI_HOST
            )
            == label_value(first_host),
            "alpha never relabelled node-2 without the hub",
            within=30,
        )
        await eventually(
            lambda: len(terminating(alpha.kube)) == 1,
            "alpha's descheduler never spread web without the hub",
            within=30,
        )
        async with alpha.bus.connection("cli") as alpha_bus:

            async def piled() -> bool:
                web = await summary_on(alpha_bus, PLACEMENTS_BUCKET, WEB)
                return web is not None and len({r.host_name for r in web.replicas}) == 1

            await until(piled, "alpha's summary never showed the vMotion")

        # The hub returns: it catches up from where it stopped, once each.
        await hub.start()
        async with hub.connection() as hub_bus, alpha.bus.connection("cli") as alpha_bus:

            async def caught_up() -> bool:
                web = await summary_on(hub_bus, FLEET_BUCKET, fleet_key("alpha", WEB))
                return web is not None and len({r.host_name for r in web.replicas}) == 1

            await until(caught_up, "the hub never caught up with alpha")
            stream = f"KV_{PLACEMENTS_BUCKET}"
            once_each(await sourced(hub_bus, "alpha", stream), await held(alpha_bus, stream))
