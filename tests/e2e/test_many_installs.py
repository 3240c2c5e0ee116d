"""Two Kubernetes clusters on one vCenter, each with its own hostaffinity (API double, bus,
node-labeller, drs-translator), running the same `kube-system/coredns` with required host
anti-affinity: each install holds its own rule over its own VMs, reports no conflict, and takes
away only its own rule; an administrator's rule stays as it was throughout.

Before install identities both translators named the rule `hostaffinity-anti-<digest>` from the
vSphere cluster and the term alone: vCenter held one rule, and the second cluster was left with
none (its translator logged `has our prefix but no ownership record` once)."""

from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim

from hostaffinity.schema import DrsRuleConflict, DrsRuleHeld, parse_drs_name
from tests.e2e.drs_harness import add_anti_affinity_rule, cluster_of, drs_state, records, vm
from tests.e2e.harness import eventually, eventually_async
from tests.e2e.installs_harness import Install, installs_on
from tests.e2e.labeller_harness import stream_events
from tests.integration.cli_runner import Cli
from tests.platform.vcsim import VcsimFactory

_vim: Any = vim
COREDNS = {"k8s-app": "kube-dns"}
# vcsim puts node-i on host (i-1) mod 3: each cluster has one node on every host.
CLUSTER_A, CLUSTER_B = ["node-1", "node-2", "node-3"], ["node-4", "node-5", "node-6"]
ADMIN_RULE = "admin-keep-node-1-and-5-apart"


def anti_rules(si: vim.ServiceInstance) -> dict[str, dict[str, Any]]:
    """Every hostaffinity anti-affinity rule in vCenter, by name, field by field."""
    return {
        fields["name"]: fields
        for fields in drs_state(si).values()
        if parse_drs_name(fields["name"]) is not None
        and fields["_type"].endswith("AntiAffinityRuleSpec")
    }


def install_of(name: str) -> str:
    parsed = parse_drs_name(name)
    assert parsed is not None, name
    assert parsed.install is not None, name
    return parsed.install


def vms_of(si: vim.ServiceInstance, install: Install) -> list[str]:
    return sorted(vm(si, node) for node in install.nodes)


def admin_rule(si: vim.ServiceInstance) -> dict[str, Any]:
    return drs_state(si)[f"rule:{ADMIN_RULE}"]


async def conflicts(install: Install) -> list[DrsRuleConflict]:
    assert install.bus is not None
    return [e for e in await stream_events(install.bus) if isinstance(e, DrsRuleConflict)]


async def test_the_same_workload_in_two_clusters_gets_a_rule_each_and_loses_only_its_own(
    vcsim: VcsimFactory, tmp_path: Path
) -> None:
    vc = vcsim(hosts=3, vms=6)
    si = vc.connect()
    add_anti_affinity_rule(si, ADMIN_RULE, [vm(si, n) for n in ("node-1", "node-5")])
    by_hand = admin_rule(si)
    # One install names itself, the other is known by its kube-system Namespace's UID.
    plans = [("east", CLUSTER_A, "prod-east"), ("west", CLUSTER_B, "")]
    async with installs_on(vc, tmp_path, plans) as (east, west):
        assert east.token != west.token
        vms_a, vms_b = vms_of(si, east), vms_of(si, west)
        east.seed_apart("kube-system", "coredns", COREDNS)
        west.seed_apart("kube-system", "coredns", COREDNS)

        def by_install() -> dict[str, list[str]]:
            return {install_of(name): sorted(rule["vm"]) for name, rule in anti_rules(si).items()}

        await eventually(
            lambda: by_install() == {east.token: vms_a, west.token: vms_b},
            "one rule per cluster, each over its own cluster's VMs",
            20,
        )
        for install, vms in ((east, vms_a), (west, vms_b)):
            assert install.bus is not None
            owned = [(r.name, r.vms, r.cluster) for r in (await records(install.bus)).values()]
            (name,) = [n for n, rule in anti_rules(si).items() if sorted(rule["vm"]) == vms]
            assert owned == [(name, vms, install.cluster_identity)]
            assert await conflicts(install) == []
        assert admin_rule(si) == by_hand
        kept = anti_rules(si)[
            next(n for n, r in anti_rules(si).items() if sorted(r["vm"]) == vms_b)
        ]

        east.delete_apart("kube-system", "coredns")
        await eventually(
            lambda: by_install() == {west.token: vms_b}, "only the east cluster's rule removed", 20
        )
        await eventually(
            lambda: east.translator is not None and east.translator.translator.idle(), "east idle"
        )
        assert anti_rules(si)[kept["name"]] == kept  # the west rule never edited, same key
        assert admin_rule(si) == by_hand
        assert east.bus is not None
        assert await records(east.bus) == {}
        assert await conflicts(east) == []
        assert await conflicts(west) == []


async def test_two_installs_configured_with_the_same_cluster_name_say_so(
    vcsim: VcsimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name is all vCenter keeps of its owner: two installs told they are the same cluster
    name the same rule. The one that finds it without a record reports it as named for it but
    not its own, pointing at the configuration, and never touches it; its `status` and `explain
    pod` say its coredns has no DRS rule, for as long as that lasts."""
    vc = vcsim(hosts=3, vms=6)
    si = vc.connect()
    plans = [("east", CLUSTER_A, "prod"), ("west", CLUSTER_B, "prod")]
    async with installs_on(vc, tmp_path, plans) as (east, west):
        east.seed_apart("kube-system", "coredns", COREDNS)
        await eventually(lambda: len(anti_rules(si)) == 1, "east's rule", 20)
        (first,) = anti_rules(si).values()
        west.seed_apart("kube-system", "coredns", COREDNS)

        async def west_reported() -> bool:
            return any(e.reason == "prefix-without-record" for e in await conflicts(west))

        await eventually_async(west_reported, "west reports the rule it does not own", 20)
        (found,) = [e for e in await conflicts(west) if e.reason == "prefix-without-record"]
        assert found.name == first["name"]
        assert "shared.cluster.name" in found.message
        assert anti_rules(si) == {first["name"]: first}  # untouched

        cli = Cli(west.kubeconfig, west.nats, capsys)
        _, explained = await cli.json("explain", "pod", "kube-system/coredns-0")
        (sentence,) = explained["drs_not_held"]
        assert first["name"] in sentence
        assert "did not make" in sentence
        code, status = await cli.json("status")
        assert code == 1
        assert status["drs_not_held"] == [sentence]
        assert sentence in status["problems"]
        assert status["cluster"] == "prod"


async def test_each_install_reports_what_the_other_s_rules_do_to_the_shared_hosts(
    vcsim: VcsimFactory, tmp_path: Path
) -> None:
    """Both clusters keep three replicas apart on the three hosts they share. Each install
    lists the other's rule and says a host failure leaves it no failover room. With the east
    install's translator down, a host entering maintenance waits on east's rule, enabled as
    nobody holds it: west holds its own rule and its hold, its report and its metric name
    east's rule as what still blocks the host."""
    vc = vcsim(hosts=3, vms=6, enter_maintenance_seconds=60)
    si = vc.connect()
    cluster = cluster_of(si)._moId
    plans = [("east", CLUSTER_A, "prod-east"), ("west", CLUSTER_B, "prod-west")]
    async with installs_on(vc, tmp_path, plans) as (east, west):
        east.seed_apart("kube-system", "coredns", COREDNS)
        west.seed_apart("kube-system", "coredns", COREDNS)
        await eventually(lambda: len(anti_rules(si)) == 2, "a rule per cluster", 20)
        (east_rule,) = [n for n in anti_rules(si) if install_of(n) == east.token]
        (west_rule,) = [n for n in anti_rules(si) if install_of(n) == west.token]

        async def names_the_other(install: Install, other_rule: str) -> bool:
            report = await install.report("vcsim", cluster)
            return report is not None and [(w.risk, w.rule) for w in report.shared_hosts] == [
                ("no-failover-room", other_rule)
            ]

        await eventually_async(lambda: names_the_other(west, east_rule), "west names east's")
        await eventually_async(lambda: names_the_other(east, west_rule), "east names west's")
        west_report = await west.report("vcsim", cluster)
        assert west_report is not None
        assert [(r.name, r.install, r.enabled) for r in west_report.other_installs] == [
            (east_rule, east.token, True)
        ]
        assert west_report.unprotected == []

        await east.stop_translator()
        host = next(h for h in cluster_of(si).host if h.name == "DC0_C0_H0")
        host.EnterMaintenanceMode_Task(timeout=0)
        await eventually(
            lambda: not anti_rules(si)[west_rule]["enabled"], "west holds its own rule", 20
        )
        assert anti_rules(si)[east_rule]["enabled"]

        async def blocked_by_east() -> bool:
            report = await west.report("vcsim", cluster)
            return report is not None and [(w.risk, w.rule) for w in report.shared_hosts] == [
                ("blocks-maintenance", east_rule)
            ]

        await eventually_async(blocked_by_east, "west's report: east's rule blocks the host")
        assert west.bus is not None
        bus = west.bus

        async def held_events() -> list[DrsRuleHeld]:
            return [e for e in await stream_events(bus) if isinstance(e, DrsRuleHeld)]

        async def announced() -> bool:  # published from the outbox after the hold is written
            return [e.name for e in await held_events() if not e.restored] == [west_rule]

        await eventually_async(announced, "west's drs.rule.held published")
        assert east_rule in (await held_events())[-1].message
