"""The upgrade from a release that named DRS objects without the install's identity (0.1.0:
`hostaffinity-<kind>-<digest>`): the first cycle renames each in place. The VMs are kept apart,
and kept on their hosts, at every moment: vCenter's state is read after every reconfigure the
translator makes (the only moments it changes), and in each an enabled rule keeps the replicas'
VMs apart and a VM-Host rule names groups that exist. No rule is removed and added back: each
keeps the key vCenter gave it."""

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from nats.js.kv import KeyValue

from hostaffinity.drs_translator.announcements import KeptAnnouncements
from hostaffinity.drs_translator.applier import DrsApplier
from hostaffinity.drs_translator.core.diff import Change
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.records import OwnershipRecords
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.vcenter.session import VCenterSession
from hostaffinity.schema import DRS_BUCKET, DrsName, DrsRulesApplied, EventFactory, parse_drs_name
from tests.campaign.snapshot import desired_drs
from tests.e2e.drs_harness import (
    cluster_of,
    drs_config,
    drs_state,
    install_of,
    pod_manifest,
    reading_vcenter_after_every_reconfigure,
    records,
    running_translator,
    vm,
)
from tests.e2e.harness import eventually
from tests.e2e.labeller_harness import (
    labeller_config,
    node_object,
    running,
    stream_events,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import Vcsim, VcsimFactory

NODES = [f"node{i}" for i in range(1, 7)]
WEB = {"app": "web"}
# Any install token: the planner is run here only for its objects and digests.
PLANNING_TOKEN = "planning"
AFTER_UPGRADE = "after-upgrade"


def renamed_for(legacy_name: str, token: str) -> str:
    parsed = parse_drs_name(legacy_name)
    assert parsed is not None
    return str(parsed.of_install(token))


@pytest.fixture
def vc(vcsim: VcsimFactory, kube_double: KubeDouble) -> Vcsim:
    started = vcsim(hosts=3, vm_names=NODES)
    for name in NODES:
        kube_double.seed(node_object(name))
    return started


def legacy(obj: DrsObject) -> DrsObject:
    """The object as 0.1.0 named it: the same digest, no install."""

    def name(of: str) -> str:
        if not of:
            return of
        parsed = parse_drs_name(of)
        assert parsed is not None
        return str(DrsName(parsed.kind, None, parsed.digest))

    return DrsObject(
        name(obj.name),
        obj.kind,
        obj.cluster_moid,
        vms=obj.vms,
        hosts=obj.hosts,
        vm_group=name(obj.vm_group),
        host_group=name(obj.host_group),
        mandatory=obj.mandatory,
        pods=obj.pods,
        reason=obj.reason,
    )


async def last_release_s_state(
    vc: Vcsim, bus: Bus, kube: KubeDouble, cluster: str
) -> list[DrsObject]:
    """What a 0.1.0 translator left for the pods the double holds: its objects in vCenter and
    its ownership records (no cluster identity), under its names."""
    topology = await (await bus.topology()).snapshot()
    namespaces = kube.store.objects("namespaces", None)
    plan = desired_drs(PLANNING_TOKEN, namespaces, kube.store.objects("pods", None), topology, [])
    objects = [legacy(o) for o in plan.clusters[cluster].objects.values()]
    groups = [o for o in objects if not o.is_rule]
    rules = [o for o in objects if o.is_rule]
    async with VCenterSession(vc.settings(name="vcsim")) as session:
        await ClusterRules(session).reconfigure(
            cluster, [Change("add", o) for o in (*groups, *rules)]
        )
    kv = await bus.js.key_value(DRS_BUCKET)
    owned = OwnershipRecords(kv, "vcsim", cluster="")
    for obj in objects:
        await owned.put(obj.record("vcsim", state="applied", recorded_at="t", applied_at="t"))
    return objects


async def web_and_db_as_the_last_release_left_them(
    vc: Vcsim, bus: Bus, kube: KubeDouble, cluster: str
) -> list[DrsObject]:
    """Three web replicas kept apart (node1..3) and a db pod on hosts H0 and H1 (node5), with
    the DRS rules and records a 0.1.0 translator made for them (once the labeller placed the
    nodes)."""
    for i, node in enumerate(("node1", "node2", "node3")):
        kube.seed(pod_manifest(f"web-{i}", node, WEB, apart_from=WEB))
    kube.seed(pod_manifest("db", "node5", {"app": "db"}, on_hosts=["DC0_C0_H0", "DC0_C0_H1"]))
    return await last_release_s_state(vc, bus, kube, cluster)


def protected(state: dict[str, dict[str, Any]], web_vms: Sequence[str], db_vm: str) -> str:
    """Why this moment of vCenter leaves the VMs unprotected, or "" when it does not."""
    rules = [v for k, v in state.items() if k.startswith("rule:")]
    groups = {v["name"]: v for k, v in state.items() if k.startswith("group:")}
    apart = [
        r
        for r in rules
        if r["_type"].endswith("AntiAffinityRuleSpec") and sorted(r["vm"]) == sorted(web_vms)
    ]
    if len(apart) != 1 or not apart[0]["enabled"]:
        return f"no single enabled anti-affinity rule over {sorted(web_vms)}: {rules}"
    (on_host,) = [r for r in rules if r["_type"].endswith("VmHostRuleInfo")] or [None]
    if on_host is None or not on_host["enabled"]:
        return f"no enabled VM-Host rule: {rules}"
    vm_group = groups.get(on_host["vmGroupName"])
    if (
        vm_group is None
        or vm_group["vm"] != [db_vm]
        or on_host["affineHostGroupName"] not in groups
    ):
        return f"the VM-Host rule names groups vCenter does not hold as asked: {state}"
    return ""


async def test_an_upgrade_renames_the_last_release_s_objects_in_place_without_a_gap(
    vc: Vcsim,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    si = vc.connect()
    cluster = cluster_of(si)._moId
    web_vms = [vm(si, n) for n in ("node1", "node2", "node3")]
    db_vm = vm(si, "node5")
    async with running(labeller_config(vc, nats_server, kubeconfig)) as labeller:
        await wait_ready(labeller)
        old = await web_and_db_as_the_last_release_left_them(vc, bus, kube_double, cluster)
        before = drs_state(si)
        assert protected(before, web_vms, db_vm) == ""
        keys = {v["name"]: v["key"] for v in before.values() if v.get("key")}
        token = install_of(kube_double)

        async with (
            reading_vcenter_after_every_reconfigure(si, monkeypatch) as states,
            running_translator(drs_config(vc, nats_server, kubeconfig)),
        ):
            await eventually(
                lambda: all(
                    (parse_drs_name(v["name"]) or DrsName("vm-group", None, "")).install == token
                    for v in drs_state(si).values()
                ),
                "every object named for this install",
            )
            await asyncio.sleep(0.5)  # a cycle more: nothing else may follow

    # New groups, the rules renamed, the old groups removed; and nothing after.
    assert len(states) == 3
    for moment, state in enumerate(states):
        assert protected(state, web_vms, db_vm) == "", f"after reconfigure {moment + 1}"
    after = drs_state(si)
    renamed = {o.name: renamed_for(o.name, token) for o in old}
    assert sorted(v["name"] for v in after.values()) == sorted(renamed.values())
    for old_name, key in keys.items():
        assert after[f"rule:{renamed[old_name]}"]["key"] == key  # the same rule, renamed
    owned = await records(bus)
    assert sorted(r.name for r in owned.values()) == sorted(renamed.values())
    assert {r.cluster for r in owned.values()} == {
        kube_double.read("v1", "namespaces", "kube-system")["metadata"]["uid"]  # type: ignore[index]
    }
    announced: dict[str, str] = {}
    for event in await stream_events(bus):
        if isinstance(event, DrsRulesApplied):
            assert not event.removed or set(event.removed) <= set(renamed)
            announced |= event.renamed
    assert announced == renamed


class Crash(Exception):
    """The process ended here (the applier's state in memory is lost with it)."""


async def rename_in_a_new_process(session: VCenterSession, kv: KeyValue, cluster: str) -> None:
    """A fresh applier over what the bucket holds renames, as a restarted translator would."""
    records = OwnershipRecords(kv, "vcsim", AFTER_UPGRADE)
    await records.load()
    applier = DrsApplier(
        ClusterRules(session),
        records,
        KeptAnnouncements(kv, "vcsim"),
        lambda _: None,
        DrsMetrics(),
        vcenter="vcsim",
        install=AFTER_UPGRADE,
        event_factory=EventFactory("drs-translator"),
    )
    await applier.rename_legacy(cluster)


@pytest.mark.parametrize("crash_after", [1, 2, 3])
async def test_a_rename_cut_short_by_a_crash_is_finished_by_the_next_run(
    vc: Vcsim,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
    crash_after: int,
) -> None:
    si = vc.connect()
    cluster = cluster_of(si)._moId
    async with running(labeller_config(vc, nats_server, kubeconfig)) as labeller:
        await wait_ready(labeller)
        old = await web_and_db_as_the_last_release_left_them(vc, bus, kube_double, cluster)
    keys = {v["name"]: v["key"] for v in drs_state(si).values() if v.get("key")}
    reconfigure = ClusterRules.reconfigure
    made = 0

    async def then_crash(self: ClusterRules, cluster: str, changes: Sequence[Change]) -> None:
        nonlocal made
        await reconfigure(self, cluster, changes)
        made += 1
        if made == crash_after:
            raise Crash

    kv = await bus.js.key_value(DRS_BUCKET)
    async with VCenterSession(vc.settings(name="vcsim")) as session:
        with monkeypatch.context() as patched:
            patched.setattr(ClusterRules, "reconfigure", then_crash)
            with contextlib.suppress(Crash):
                await rename_in_a_new_process(session, kv, cluster)
        assert made == crash_after
        await rename_in_a_new_process(session, kv, cluster)
    renamed = {o.name: renamed_for(o.name, AFTER_UPGRADE) for o in old}
    after = drs_state(si)
    assert sorted(v["name"] for v in after.values()) == sorted(renamed.values())
    for old_name, key in keys.items():
        assert after[f"rule:{renamed[old_name]}"]["key"] == key
    assert sorted(r.name for r in (await records(bus)).values()) == sorted(renamed.values())
