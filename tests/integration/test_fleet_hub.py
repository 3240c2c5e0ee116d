"""The fleet hub on NATS's own machinery, as shipped: three hub servers (hub.conf, TLS on clients,
routes and leaf nodes), installs' three-server buses joined as leaf nodes with what `hostaffinity
fleet join` wrote, the view sourced across JetStream domains and mirrored back.

What must hold: every install's placements and topology reach the hub under its token and come
back to every install's mirror; an install exports nothing else and can write nothing on the
hub; with its link cut or the hub killed an install works alone (its own buckets take writes);
when the link returns the view converges with every revision sourced exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import msgspec
import pytest
from nats.errors import NoRespondersError
from nats.js.errors import NoStreamResponseError

from hostaffinity.cli.main import main
from hostaffinity.descheduler.fleet_exposure import FleetExposure
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.bus.fleet_layout import FLEET_STREAM, LEASES_STREAM
from hostaffinity.runtime.process.config import fleet_inbox
from hostaffinity.schema import (
    FLEET_BUCKET,
    HUB_DOMAIN,
    PLACEMENTS_BUCKET,
    TOPOLOGY_BUCKET,
    NodePlacement,
    ReplicaPlacement,
    WorkloadPlacement,
    fleet_key,
    hub_deliver_prefix,
    install_domain,
    jetstream_api,
    mirror_deliver_prefix,
    node_key,
    workload_key,
)
from tests.platform.bus_probe import session
from tests.platform.console import exit_code
from tests.platform.fleet_hub import FleetHub, held, once_each, running_hub, sourced, view
from tests.platform.nats_cluster import NatsCluster

CONVERGE_SECONDS = 60.0


def summary(cluster: str, name: str, hosts: Iterable[str]) -> bytes:
    replicas = [
        ReplicaPlacement(pod=f"{name}-{i}", node=f"node-{i}", host_id=host, host_name=host)
        for i, host in enumerate(hosts)
    ]
    value = WorkloadPlacement(
        cluster=cluster, namespace="shop", kind="Deployment", name=name, replicas=replicas
    )
    return msgspec.json.encode(value)


async def until(check: Callable[[], object], what: str) -> None:
    async with asyncio.timeout(CONVERGE_SECONDS):
        while True:
            with contextlib.suppress(Exception):
                if await check():  # type: ignore[misc]
                    return
            await asyncio.sleep(0.25)
    raise AssertionError(what)


@contextlib.asynccontextmanager
async def fleet(
    tmp_path: Path, names: list[str], cuttable: str = ""
) -> AsyncIterator[tuple[FleetHub, dict[str, NatsCluster]]]:
    """The hub and the named installs (cluster identity = name), joined and provisioned; the
    install `cuttable` reaches the hub through `hub.links[cuttable]`."""
    async with contextlib.AsyncExitStack() as stack:
        hub = FleetHub(tmp_path / "hub")
        installs = {
            name: hub.join(name, name, tmp_path / name, cuttable=name == cuttable) for name in names
        }
        await hub.start()
        stack.push_async_callback(hub.close)
        for install in installs.values():
            await install.start()
            stack.push_async_callback(install.stop)
            await install.provision()
        await hub.provision()
        yield hub, installs


async def put(install: NatsCluster, bucket: str, key: str, value: bytes) -> int:
    """Written as the service that owns the bucket writes it; asked again while the stream has
    no leader to answer (a three-server bus just started, on a loaded machine), as the
    services' writes are."""
    identity = "descheduler" if bucket == PLACEMENTS_BUCKET else "node-labeller"
    async with install.connection(identity) as bus, asyncio.timeout(CONVERGE_SECONDS):
        kv = await bus.js.key_value(bucket)
        while True:
            try:
                return await kv.put(key, value)
            except (NoStreamResponseError, NoRespondersError):
                await asyncio.sleep(0.2)


async def delete(install: NatsCluster, key: str) -> None:
    async with install.connection("descheduler") as bus:
        await (await bus.js.key_value(PLACEMENTS_BUCKET)).delete(key)


WEB = workload_key("shop", "Deployment", "web")
DB = workload_key("shop", "Deployment", "db")


async def test_every_install_sees_every_install_through_its_own_mirror(tmp_path: Path) -> None:
    async with fleet(tmp_path, ["alpha", "beta"]) as (hub, installs):
        for name, install in installs.items():
            await put(install, PLACEMENTS_BUCKET, WEB, summary(name, "web", ["esx-1", "esx-2"]))
            await put(install, TOPOLOGY_BUCKET, node_key("node-0.example"), b'{"node":"x"}')
        wanted = {
            fleet_key(name, key) for name in installs for key in (WEB, node_key("node-0.example"))
        }

        async def has_all(
            bus_of: Callable[[], contextlib.AbstractAsyncContextManager[Bus]],
        ) -> bool:
            async with bus_of() as bus:
                return set(await view(bus)) == wanted

        await until(lambda: has_all(hub.connection), "the hub's view never held every key")
        for name, install in installs.items():
            await until(
                lambda install=install: has_all(lambda: install.connection("cli")),
                f"{name}'s mirror never held every key",
            )
        async with installs["alpha"].connection("cli") as bus:
            seen = await view(bus)
        decoded = msgspec.json.decode(seen[fleet_key("beta", WEB)], type=WorkloadPlacement)
        assert decoded.cluster == "beta"
        assert [r.host_id for r in decoded.replicas] == ["esx-1", "esx-2"]


async def test_an_install_exports_only_its_summary_and_topology(tmp_path: Path) -> None:
    async with fleet(tmp_path, ["alpha", "beta"]) as (hub, _):
        async with hub.connection("fleet-provision") as provisioning:
            sources = (await provisioning.js.stream_info(FLEET_STREAM)).config.sources or []
        # Two sources per install: its summary and its topology, nothing else.
        assert sorted((s.name, s.external.deliver) for s in sources if s.external) == sorted(
            (f"KV_{bucket}", hub_deliver_prefix(name))
            for name in ("alpha", "beta")
            for bucket in (PLACEMENTS_BUCKET, TOPOLOGY_BUCKET)
        )
        # alpha's hub credentials, used as a client, may do none of what would read another
        # install, write the view or touch the hub's JetStream beyond its mirror's consumer.
        seed = re.search(
            r'nkey: "(SU[A-Z0-9]+)"', (hub.folder.install_dir("alpha") / "fleet.conf").read_text()
        )
        assert seed is not None
        seed_file = tmp_path / "alpha-hub.nk"
        seed_file.write_text(seed[1])
        async with session(hub, "install-alpha", seed_file) as alpha:  # type: ignore[arg-type]
            beta_api = jetstream_api(install_domain("beta"))
            # A client in the hub's domain has `$JS.<hub>.API` mapped to `$JS.API` before the
            # check, and is refused under that name.
            hub_api = jetstream_api(HUB_DOMAIN)
            for subject in (
                f"{beta_api}.CONSUMER.CREATE.KV_{PLACEMENTS_BUCKET}",
                f"{jetstream_api(install_domain('alpha'))}.STREAM.INFO.HOSTAFFINITY_EVENTS",
                f"{hub_api}.STREAM.DELETE.{FLEET_STREAM}",
                f"{hub_api}.STREAM.UPDATE.{FLEET_STREAM}",
                f"$KV.{FLEET_BUCKET}.beta.{WEB}",
                f"{hub_api}.STREAM.PURGE.{LEASES_STREAM}",
                f"{hub_deliver_prefix('beta')}.S.forged",
            ):
                await alpha.nc.publish(subject, b"{}", reply=alpha.nc.new_inbox())
                await alpha.nc.flush()
                assert await alpha.refused(subject.replace(hub_api, "$JS.API")), subject
            # The leases' allowance opens the leases bucket's keys, not the view's (the hub maps
            # a `$KV` subject of its domain to the bucket's own subject, and refuses that).
            forged = f"{FLEET_BUCKET}.beta.forged"
            await alpha.nc.publish(f"{hub_api}.$KV.{forged}", b"{}", reply=alpha.nc.new_inbox())
            await alpha.nc.flush()
            assert await alpha.refused(f"$KV.{forged}")
            for subject in (
                f"{hub_deliver_prefix('beta')}.>",
                f"{mirror_deliver_prefix('beta')}.>",
                f"{beta_api}.>",
                f"{fleet_inbox('drs-translator', 'beta')}.>",  # beta's answers about leases
            ):
                assert await alpha.subscribe_refused(subject), subject


async def _true(value: bool) -> bool:
    return value


async def _has(bus: Bus, key: str) -> bool:
    return key in await view(bus)


async def test_a_cut_link_loses_nothing_and_counts_nothing_twice(tmp_path: Path) -> None:
    async with fleet(tmp_path, ["alpha", "beta"], cuttable="alpha") as (hub, installs):
        alpha, beta = installs["alpha"], installs["beta"]
        await put(alpha, PLACEMENTS_BUCKET, WEB, summary("alpha", "web", ["esx-1", "esx-2"]))
        async with alpha.connection("cli") as bus:
            await until(lambda: _has(bus, fleet_key("alpha", WEB)), "first summary never came")
        await hub.links["alpha"].cut()
        # Alone, alpha takes every write (its services work as without a fleet), beta goes on
        # through the hub, and alpha's mirror keeps what it had.
        for revision in range(5):
            hosts = ["esx-1", f"esx-{revision + 3}"]
            await put(alpha, PLACEMENTS_BUCKET, WEB, summary("alpha", "web", hosts))
        await put(alpha, PLACEMENTS_BUCKET, DB, summary("alpha", "db", ["esx-9"]))
        await delete(alpha, DB)
        await put(beta, PLACEMENTS_BUCKET, WEB, summary("beta", "web", ["esx-1"]))
        async with alpha.connection("cli") as bus:
            stale = await view(bus)
        assert fleet_key("beta", WEB) not in stale
        assert fleet_key("alpha", WEB) in stale
        await hub.links["alpha"].restore()
        async with hub.connection() as hub_bus, alpha.connection("cli") as alpha_bus:
            origin = await alpha_bus.js.stream_info(f"KV_{PLACEMENTS_BUCKET}")
            last = origin.state.last_seq

            async def caught_up() -> bool:
                got = await sourced(hub_bus, "alpha", f"KV_{PLACEMENTS_BUCKET}")
                return bool(got) and got[-1] == last

            await until(caught_up, "the hub never caught up with alpha")
            got = await sourced(hub_bus, "alpha", f"KV_{PLACEMENTS_BUCKET}")
            once_each(got, await held(alpha_bus, f"KV_{PLACEMENTS_BUCKET}"))
            # The first revision, sourced before the cut, and then only what alpha still held
            # when the link came back (its bucket keeps one revision per key).
            assert got[0] == 1
            assert len(got) == 1 + len(await held(alpha_bus, f"KV_{PLACEMENTS_BUCKET}"))
            final = await view(hub_bus)
            assert fleet_key("alpha", DB) not in final
            web = msgspec.json.decode(final[fleet_key("alpha", WEB)], type=WorkloadPlacement)
            assert [r.host_id for r in web.replicas] == ["esx-1", "esx-7"]
            await until(
                lambda: _has(alpha_bus, fleet_key("beta", WEB)), "alpha's mirror never caught up"
            )


async def test_a_killed_hub_leaves_installs_alone_and_catches_up(tmp_path: Path) -> None:
    async with fleet(tmp_path, ["alpha"]) as (hub, installs):
        alpha = installs["alpha"]
        await put(alpha, PLACEMENTS_BUCKET, WEB, summary("alpha", "web", ["esx-1", "esx-1"]))
        async with alpha.connection("cli") as bus:
            await until(lambda: _has(bus, fleet_key("alpha", WEB)), "first summary never came")
        # The descheduler's gauges, from alpha's mirror as its descheduler reads it.
        gauges = FleetExposure("alpha", refresh_seconds=0.2)
        async with alpha.connection("descheduler") as desched, asyncio.TaskGroup() as group:
            watching = group.create_task(gauges.run(desched.js))
            await until(
                lambda: _true(gauges.exposed["workload"] == 2), "the exposure gauge never said 2"
            )
            for server in hub.servers:
                await server.kill()
            await until(
                lambda: _true((gauges.since_contact or 0) > 1),
                "the view never aged without the hub",
            )
            watching.cancel()
        for revision in range(3):
            await put(alpha, PLACEMENTS_BUCKET, WEB, summary("alpha", "web", [f"esx-{revision}"]))
        async with alpha.connection("cli") as bus:
            assert fleet_key("alpha", WEB) in await view(bus)
        await hub.start()
        async with hub.connection() as hub_bus, alpha.connection("cli") as alpha_bus:
            last = (await alpha_bus.js.stream_info(f"KV_{PLACEMENTS_BUCKET}")).state.last_seq

            async def caught_up() -> bool:
                got = await sourced(hub_bus, "alpha", f"KV_{PLACEMENTS_BUCKET}")
                return bool(got) and got[-1] == last

            await until(caught_up, "the hub never caught up after its restart")
            got = await sourced(hub_bus, "alpha", f"KV_{PLACEMENTS_BUCKET}")
            once_each(got, await held(alpha_bus, f"KV_{PLACEMENTS_BUCKET}"))


def node_placement(name: str, host: str) -> bytes:
    return msgspec.json.encode(
        NodePlacement(
            node=name, vm_moid=f"vm-{name}", bios_uuid="", instance_uuid="", host_moid=host,
            host_name=f"{host}.example", host_label=host, cluster_moid="c1", cluster_name="c1",
            datacenter="dc", vcenter="vc", observed_at="", version=1, vcenter_uuid="vc-uuid",
        )
    )  # fmt: skip


async def test_what_if_a_host_fails_names_every_cluster_s_losses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three installs on the same hosts; the CLI on one of them reads its mirror."""
    names = ["alpha", "beta", "gamma"]
    async with fleet(tmp_path, names) as (_, installs):
        for offset, (name, install) in enumerate(installs.items()):
            hosts = [f"esx-{(offset + i) % 3 + 1}" for i in range(2)]
            for i, host in enumerate(hosts):
                await put(
                    install,
                    TOPOLOGY_BUCKET,
                    node_key(f"{name}-{i}"),
                    node_placement(f"{name}-{i}", host),
                )
            replicas = [f"vc-uuid/{host}" for host in hosts]
            await put(install, PLACEMENTS_BUCKET, WEB, summary(name, "web", replicas))
        # `ledger`, one replica in alpha and one in gamma, both on esx-1, in fleet group payments.
        ledger = workload_key("shop", "Deployment", "ledger")
        for name, node in (("alpha", "alpha-0"), ("gamma", "gamma-1")):
            replica = ReplicaPlacement(
                pod="ledger-0", node=node, host_id="vc-uuid/esx-1", host_name="esx-1.example"
            )
            value = WorkloadPlacement(
                cluster=name, namespace="shop", kind="Deployment", name="ledger",
                fleet_group="payments", replicas=[replica],
            )  # fmt: skip
            await put(installs[name], PLACEMENTS_BUCKET, ledger, msgspec.json.encode(value))
        alpha = installs["alpha"]
        async with alpha.connection("cli") as bus:
            await until(
                lambda: _count(bus, 11), "alpha's mirror never held the three installs' view"
            )
        settings = alpha.settings("cli")
        argv = [
            "--nats", settings.servers[0], "--nats-seed", str(settings.nkey_seed_file),
            "--nats-ca-file", str(settings.tls_ca_file),
        ]  # fmt: skip
        with pytest.raises(SystemExit) as done:
            await asyncio.to_thread(main, ["fleet", "what-if", "host-failure", "esx-1", *argv])
        assert done.value.code == 0
        printed = capsys.readouterr().out
        # esx-1 holds alpha-0 (alpha's web), gamma-1 (gamma's web); beta has nothing there.
        assert "esx-1 (vc-uuid/esx-1): 2 clusters affected" in printed
        assert "alpha: 1 nodes lost: alpha-0" in printed
        assert "gamma: 1 nodes lost: gamma-1" in printed
        assert "beta:" not in printed
        assert printed.count("shop/Deployment/web: 1 of 2 replicas") == 2
        # No web has two replicas on one host; the fleet group has two on esx-1, in two
        # clusters (read through the workloads' keys alone, as exposure reads).
        with pytest.raises(SystemExit) as done:
            await asyncio.to_thread(main, ["fleet", "exposure", "-o", "json", *argv])
        assert done.value.code == 0
        (exposed,) = json.loads(capsys.readouterr().out)
        assert (exposed["subject"], exposed["host_name"], exposed["clusters"]) == (
            "fleet group payments",
            "esx-1.example",
            ["alpha", "gamma"],
        )
        with pytest.raises(SystemExit) as done:
            await asyncio.to_thread(main, ["fleet", "topology", "-o", "json", *argv])
        rows = json.loads(capsys.readouterr().out)
        assert {row["host_name"]: sorted(row["nodes"]) for row in rows} == {
            "esx-1.example": ["alpha", "gamma"],
            "esx-2.example": ["alpha", "beta"],
            "esx-3.example": ["beta", "gamma"],
        }


async def _count(bus: Bus, wanted: int) -> bool:
    return len(await view(bus)) == wanted


async def test_a_running_bus_joins_by_restarting_its_servers_one_at_a_time(
    tmp_path: Path,
) -> None:
    """An install's bus made before it joined: its servers restarted one by one with the domain
    and leaf link `fleet join` wrote keep every key, and the install's keys reach the hub."""
    async with running_hub(tmp_path / "hub") as hub:
        alone = NatsCluster(tmp_path / "alpha")
        await alone.start()
        try:
            await alone.provision()
            await put(alone, PLACEMENTS_BUCKET, WEB, summary("alpha", "web", ["esx-1"]))
            joined = hub.join("alpha", "alpha", tmp_path / "unused")
            hub.reload()  # installs.conf now names alpha's leaf user
            folder = hub.folder.install_dir("alpha")
            for server in alone.servers:
                for name in ("fleet.conf", "fleet-domain.conf"):
                    text = (joined.servers[0].config.parent / name).read_text()
                    (server.config.parent / name).write_text(text)
            assert (folder / "fleet.conf").exists()
            for server in alone.servers:
                await server.stop()
                await server.start()
                await server.wait_healthy("")
            alone.fleet_install = "alpha"
            await alone.provision()
            await hub.provision()
            async with alone.connection("cli") as bus:
                kv = await bus.js.key_value(PLACEMENTS_BUCKET)
                assert (await kv.get(WEB)).value == summary("alpha", "web", ["esx-1"])
                await until(lambda: _has(bus, fleet_key("alpha", WEB)), "never joined")
        finally:
            await alone.stop()


async def test_an_install_that_leaves_is_gone_from_every_view(tmp_path: Path) -> None:
    async with fleet(tmp_path, ["alpha", "beta"]) as (hub, installs):
        for name, install in installs.items():
            await put(install, PLACEMENTS_BUCKET, WEB, summary(name, "web", ["esx-1"]))
        async with installs["alpha"].connection("cli") as alpha_bus:
            await until(lambda: _count(alpha_bus, 2), "alpha never saw both summaries")
            hub.folder.leave("beta")
            hub.reload()
            await hub.provision()
            async with hub.connection() as hub_bus:
                await until(
                    lambda: _keys(hub_bus, {fleet_key("alpha", WEB)}), "beta stayed on the hub"
                )
            await until(
                lambda: _keys(alpha_bus, {fleet_key("alpha", WEB)}), "beta stayed in the mirror"
            )


async def _keys(bus: Bus, wanted: set[str]) -> bool:
    return set(await view(bus)) == wanted


async def test_provision_makes_the_leases_bucket_with_its_max_age(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fleet provision` is what gives the fleet rule leases their bucket, and its max age
    (without one a crashed holder would keep its rules for ever, so 0 is refused)."""
    async with running_hub(tmp_path / "hub") as hub:
        await hub.provision()
        assert "fleet rule leases KV_hostaffinity-fleet-leases: max age 30 s" in (
            capsys.readouterr().out
        )
        async with hub.connection("fleet-provision") as bus:
            leases = (await bus.js.stream_info(LEASES_STREAM)).config
            assert (leases.max_age, leases.max_msgs_per_subject, leases.num_replicas) == (30, 1, 3)
            await hub.provision(lease_max_age_seconds=12)  # changed in place
            assert (await bus.js.stream_info(LEASES_STREAM)).config.max_age == 12
        argv = ["fleet", "provision", "--dir", str(hub.folder.directory), "--nats", hub.urls[0]]
        assert exit_code([*argv, "--lease-max-age", "0"]) == 2
        assert "must be above 0" in capsys.readouterr().err
