"""The planner: Kubernetes host-level terms in, DRS rules and groups per cluster out."""

from typing import Any

import msgspec
import pytest

from hostaffinity.affinity.interpod import HOSTNAME_KEY, apply_label_keys
from hostaffinity.drs_translator.core.naming import object_name
from hostaffinity.schema import LABEL_LEGACY_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.drs import (
    INSTALL,
    held,
    host,
    placement,
    pod,
    rules,
    run_plan,
    topology,
)

WEB = {"app": "web"}
PLACEMENTS, HOSTS = topology()


def replicas(*nodes: str, **extra: Any) -> list[Any]:
    return [pod(f"web-{n}", n, WEB, apart_from=WEB, **extra) for n in nodes]


CASES = [
    pytest.param(replicas("node1", "node3"), [("vm1", "vm3")], id="two-replicas-one-rule"),
    pytest.param(
        replicas("node1", "node3", "node5"), [("vm1", "vm3", "vm5")], id="three-replicas-one-clique"
    ),
    pytest.param(replicas("node1"), [], id="one-vm-no-rule"),
    pytest.param(replicas("node1", "node1"), [], id="same-vm-twice-no-rule"),
    pytest.param(replicas("node1", "node1", "node3"), [("vm1", "vm3")], id="vms-deduplicated"),
    pytest.param(
        [
            pod("db", "node1", {"app": "db"}, apart_from={"tier": "cache"}),
            pod("cache-a", "node2", {"tier": "cache"}),
            pod("cache-b", "node3", {"tier": "cache"}),
        ],
        [("vm1", "vm2"), ("vm1", "vm3")],
        id="apart-from-two-that-may-share-is-two-pairs",
    ),
    pytest.param(
        [pod("a", "node1", WEB, apart_from={"app": "other"}), pod("b", "node2", WEB)],
        [],
        id="selector-matches-nobody",
    ),
    pytest.param(
        replicas("node1", "node3", key=HOSTNAME_KEY), [], id="hostname-term-without-opt-in"
    ),
    pytest.param(
        replicas(
            "node1", "node3", key=HOSTNAME_KEY, annotations={POD_PHYSICAL_ANTI_AFFINITY: "true"}
        ),
        [("vm1", "vm3")],
        id="hostname-term-with-pod-opt-in",
    ),
    pytest.param(
        replicas("node1", "node3", key=LABEL_LEGACY_HOST), [("vm1", "vm3")], id="legacy-host-key"
    ),
    pytest.param(
        replicas("node1", "node3", key="topology.kubernetes.io/zone"), [], id="zone-key-ignored"
    ),
    pytest.param(
        [
            pod("a", "node1", WEB, apart_from=WEB),
            pod("b", "node3", WEB, namespace="other"),
        ],
        [],
        id="term-covers-own-namespace-only",
    ),
    pytest.param(
        [
            pod("a", "node1", WEB, apart_from=WEB, extra_term={"namespaces": ["other"]}),
            pod("b", "node3", WEB, namespace="other"),
        ],
        [("vm1", "vm3")],
        id="term-names-the-other-namespace",
    ),
    pytest.param(
        [
            pod(
                "a",
                "node1",
                WEB,
                apart_from=WEB,
                extra_term={"namespaceSelector": {"matchLabels": {"team": "blue"}}},
            ),
            pod("b", "node3", WEB, namespace="blue-ns"),
            pod("c", "node5", WEB, namespace="red-ns"),
        ],
        [("vm1", "vm3")],
        id="namespace-selector-reads-namespace-labels",
    ),
    pytest.param(
        [pod(f"p{i}", f"node{i}", WEB, preferred_apart_from=WEB) for i in (1, 3)],
        [],
        id="preferred-not-translated-by-default",
    ),
    pytest.param(
        # KubeVirt: the virt-launcher pod carries the VMI's labels and affinity.
        [
            pod(
                f"virt-launcher-db-{i}",
                f"node{i}",
                {"kubevirt.io": "virt-launcher", "kubevirt.io/domain": f"db-{i}", "vm": "db"},
                apart_from={"vm": "db"},
            )
            for i in (2, 4, 6)
        ],
        [("vm2", "vm4", "vm6")],
        id="kubevirt-virt-launcher-pods",
    ),
]


@pytest.mark.parametrize(("pods", "expected"), CASES)
def test_anti_affinity_becomes_cliques(pods: list[Any], expected: list[tuple[str, ...]]) -> None:
    namespaces = {"default": {}, "other": {}, "blue-ns": {"team": "blue"}, "red-ns": {}}
    result = run_plan(pods, PLACEMENTS, HOSTS, namespaces=namespaces)
    assert rules(result) == expected
    assert not result.conflicts


def test_cluster_wide_physical_reading() -> None:
    result = run_plan(
        replicas("node1", "node3", key=HOSTNAME_KEY),
        PLACEMENTS,
        HOSTS,
        physical_anti_affinity="cluster-wide",
    )
    assert rules(result) == [("vm1", "vm3")]


def test_preferred_translated_when_the_setting_says_so() -> None:
    pods = [pod(f"p{i}", f"node{i}", WEB, preferred_apart_from=WEB) for i in (1, 3)]
    result = run_plan(pods, PLACEMENTS, HOSTS, translate_preferred=True)
    assert rules(result) == [("vm1", "vm3")]


def test_preferred_pod_affinity_is_never_translated() -> None:
    """Even met on exactly one other VM, and with the setting on (README, drs-translator)."""
    pods = [pod("a", "node1", {"app": "a"}), pod("b", "node2", preferred_near={"app": "a"})]
    for translate_preferred in (False, True):
        result = run_plan(pods, PLACEMENTS, HOSTS, translate_preferred=translate_preferred)
        assert rules(result, "vm-affinity") == []
        assert not result.conflicts
        assert not result.untranslatable
    required = [pods[0], pod("b", "node2", near={"app": "a"})]  # the same term, required
    assert rules(run_plan(required, PLACEMENTS, HOSTS), "vm-affinity") == [("vm1", "vm2")]


def test_match_label_keys_keep_revisions_apart_only_from_their_own() -> None:
    term = {"matchLabelKeys": ["pod-template-hash"]}
    pods = [
        apply_label_keys(
            pod(f"{rev}-{n}", n, WEB | {"pod-template-hash": rev}, apart_from=WEB, extra_term=term)
        )
        for rev, n in (("a", "node1"), ("a", "node3"), ("b", "node2"), ("b", "node5"))
    ]
    assert rules(run_plan(pods, PLACEMENTS, HOSTS)) == [("vm1", "vm3"), ("vm2", "vm5")]


def test_the_rule_keeps_its_name_while_replicas_come_and_go() -> None:
    def names(*nodes: str) -> list[str]:
        result = run_plan(replicas(*nodes), PLACEMENTS, HOSTS)
        return [name for c in result.clusters.values() for name in c.objects]

    first = names("node1", "node3")
    assert len(first) == 1
    assert first[0].startswith(f"hostaffinity-{INSTALL}-anti-")
    assert names("node1", "node3", "node5") == first
    assert names("node1", "node5") == first


WORKER = {"app": "worker"}  # sorts after "web": its group's key is the larger


def workers(*nodes: str) -> list[Any]:
    return [pod(f"worker-{n}", n, WORKER, apart_from=WORKER) for n in nodes]


def test_a_workload_on_vms_a_rule_already_keeps_apart_adds_no_rule() -> None:
    """A clique inside another is dropped: a second workload kept apart on the same two VMs
    changes nothing DRS holds, so no reconfigure follows its pods (why reaction_bench picks
    sample pairs that no other workload keeps apart). The rule stands for both workloads."""
    web = replicas("node1", "node3")
    (alone,) = run_plan(web, PLACEMENTS, HOSTS).clusters["domain-c1"].objects.values()
    existing = {"domain-c1": {alone.name}}
    result = run_plan(web + workers("node1", "node3"), PLACEMENTS, HOSTS, existing=existing)
    (both,) = result.clusters["domain-c1"].objects.values()
    assert both.name == alone.name
    assert both.same_content(alone)
    assert both.pods == (
        "default/web-node1",
        "default/web-node3",
        "default/worker-node1",
        "default/worker-node3",
    )


def test_a_group_arriving_on_a_rule_s_vms_does_not_rename_it_whatever_its_key() -> None:
    """Of groups kept apart on the same VMs (two workloads spread over the same node VMs, as on
    a small cluster), the one whose rule vCenter holds keeps it: the smaller key of the group
    arriving must not replace it (a remove and an add in vCenter, for nothing). With neither
    rule there, the smaller key's is made."""
    web, worker_pods = replicas("node1", "node3"), workers("node1", "node3")
    (web_rule,) = run_plan(web, PLACEMENTS, HOSTS).clusters["domain-c1"].objects
    (worker_rule,) = run_plan(worker_pods, PLACEMENTS, HOSTS).clusters["domain-c1"].objects
    for existing, kept in ((worker_rule, worker_rule), (web_rule, web_rule), (None, web_rule)):
        named = {"domain-c1": {existing}} if existing else {}
        result = run_plan(web + worker_pods, PLACEMENTS, HOSTS, existing=named)
        assert list(result.clusters["domain-c1"].objects) == [kept], existing


def test_groups_spanning_clusters_are_split_per_cluster() -> None:
    placements = {
        f"node{i}": placement(f"node{i}", f"vm{i}", f"{h}{i % 3}", cluster)
        for h, cluster, nodes in (("h", "domain-c1", (1, 2, 3)), ("g", "domain-c2", (4, 5, 6)))
        for i in nodes
    }
    hosts = {
        **{f"h{i}": host(f"h{i}", "domain-c1") for i in range(3)},
        **{f"g{i}": host(f"g{i}", "domain-c2") for i in range(3)},
    }
    result = run_plan(replicas("node1", "node2", "node4", "node5", "node6"), placements, hosts)
    assert [
        (c, rules_of)
        for c, rules_of in sorted(
            (moid, [o.vms for o in cp.objects.values()]) for moid, cp in result.clusters.items()
        )
    ] == [("domain-c1", [("vm1", "vm2")]), ("domain-c2", [("vm4", "vm5", "vm6")])]


def test_pods_of_another_vcenter_or_without_placement_are_left_out() -> None:
    placements = dict(PLACEMENTS)
    placements["node3"] = msgspec.structs.replace(placements["node3"], vcenter="elsewhere")
    del placements["node5"]
    result = run_plan(replicas("node1", "node2", "node3", "node5"), placements, HOSTS)
    assert rules(result) == [("vm1", "vm2")]


def test_required_affinity_to_pods_on_one_vm_is_a_vm_affinity_rule() -> None:
    pods = [
        pod("db", "node2", {"app": "db"}),
        pod("db-sidecar", "node2", {"app": "db"}),
        pod("web", "node1", WEB, near={"app": "db"}),
    ]
    result = run_plan(pods, PLACEMENTS, HOSTS)
    assert rules(result, "vm-affinity") == [("vm1", "vm2")]
    assert not result.untranslatable


def test_required_affinity_to_pods_on_two_vms_is_not_translatable() -> None:
    pods = [
        pod("db-0", "node2", {"app": "db"}),
        pod("db-1", "node3", {"app": "db"}),
        pod("web", "node1", WEB, near={"app": "db"}),
    ]
    result = run_plan(pods, PLACEMENTS, HOSTS)
    assert rules(result, "vm-affinity") == []
    assert [u.pod for u in result.untranslatable] == ["default/web"]
    assert "2 VMs" in result.untranslatable[0].message


def test_required_affinity_met_on_its_own_vm_needs_no_rule() -> None:
    pods = [pod("db", "node1", {"app": "db"}), pod("web", "node1", WEB, near={"app": "db"})]
    result = run_plan(pods, PLACEMENTS, HOSTS)
    assert rules(result, "vm-affinity") == []
    assert not result.untranslatable


def test_more_anti_affine_vms_than_usable_hosts_is_a_conflict_and_held() -> None:
    result = run_plan(replicas("node1", "node2", "node3", "node4"), PLACEMENTS, HOSTS)
    assert rules(result) == []
    (conflict,) = result.conflicts
    assert conflict.reason == "too-few-hosts"
    assert conflict.vms == ("vm1", "vm2", "vm3", "vm4")
    assert conflict.name in result.clusters["domain-c1"].held


def test_hosts_of_another_vcenter_never_count_even_with_the_same_moids() -> None:
    """vcsim and real vCenters reuse moids (`domain-c1`, `h3` in both): only ours count."""
    theirs = {
        f"elsewhere.h{i}": msgspec.structs.replace(host(f"h{i}"), vcenter="elsewhere")
        for i in range(3, 6)
    }
    result = run_plan(replicas("node1", "node2", "node3", "node4"), PLACEMENTS, HOSTS | theirs)
    assert rules(result) == []
    assert [c.reason for c in result.conflicts] == ["too-few-hosts"]


@pytest.mark.parametrize(
    "state", [{"maintenance": True}, {"entering": True}], ids=["in-maintenance", "entering"]
)
def test_a_rule_the_hosts_left_cannot_satisfy_is_held_disabled_not_dropped(
    state: dict[str, bool],
) -> None:
    """DRS would not evacuate h2 while 3 VMs must be apart on the 2 hosts left: the rule is
    sent disabled, saying why, and no conflict is reported (nothing was refused)."""
    hosts = dict(HOSTS) | {"h2": host("h2", **state)}
    result = run_plan(replicas("node1", "node2", "node3"), PLACEMENTS, hosts)
    assert rules(result) == [("vm1", "vm2", "vm3")]
    ((name, because),) = held(result).items()
    assert "h2" in because
    assert "3 VMs kept apart, 2 hosts left" in because
    assert result.clusters["domain-c1"].maintenance_holds == {name: ("h2",)}
    assert not result.conflicts


def test_a_rule_the_hosts_satisfy_without_the_one_leaving_stays_enforced() -> None:
    hosts = dict(HOSTS) | {"h2": host("h2", entering=True)}
    result = run_plan(replicas("node1", "node2"), PLACEMENTS, hosts)
    assert rules(result) == [("vm1", "vm2")]
    assert held(result) == {}


def test_more_vms_than_all_hosts_stays_a_conflict_whatever_the_maintenance() -> None:
    hosts = dict(HOSTS) | {"h2": host("h2", entering=True)}
    result = run_plan(replicas("node1", "node2", "node3", "node4"), PLACEMENTS, hosts)
    assert rules(result) == []
    assert [c.reason for c in result.conflicts] == ["too-few-hosts"]


def test_a_must_vm_host_rule_onto_hosts_all_entering_maintenance_is_held() -> None:
    hosts = dict(HOSTS) | {"h0": host("h0", entering=True)}
    pods = [pod("a", "node1", on_hosts=["h0"])]
    result = run_plan(pods, PLACEMENTS, hosts, vm_host_mandatory=True)
    objects = {o.kind: o for o in result.clusters["domain-c1"].objects.values()}
    assert not objects["vm-host"].enabled
    assert "h0" in objects["vm-host"].held_because
    assert objects["vm-group"].enabled
    should = run_plan(pods, PLACEMENTS, hosts)  # "should" rules never block an evacuation
    assert held(should) == {}


def test_a_pair_kept_together_and_apart_is_a_conflict_for_both_rules() -> None:
    pods = [
        pod("a", "node1", {"app": "a"}, apart_from={"app": "b"}),
        pod("b", "node2", {"app": "b"}, near={"app": "a"}),
    ]
    result = run_plan(pods, PLACEMENTS, HOSTS)
    assert rules(result) == []
    assert rules(result, "vm-affinity") == []
    assert sorted(c.reason for c in result.conflicts) == ["together-and-apart"] * 2
    assert len(result.clusters["domain-c1"].held) == 2


def test_node_affinity_on_hosts_is_a_should_vm_host_rule_with_two_groups() -> None:
    pods = [pod("a", "node1", on_hosts=["h0", "h1"]), pod("b", "node4", on_hosts=["h1", "h0"])]
    result = run_plan(pods, PLACEMENTS, HOSTS)
    objects = {o.kind: o for o in result.clusters["domain-c1"].objects.values()}
    assert objects["vm-group"].vms == ("vm1", "vm4")
    assert objects["host-group"].hosts == ("h0", "h1")
    rule = objects["vm-host"]
    assert (rule.vm_group, rule.host_group, rule.mandatory) == (
        objects["vm-group"].name,
        objects["host-group"].name,
        False,
    )
    assert rule.name == object_name("vm-host", "domain-c1", "hosts:h0,h1:should", INSTALL)


def test_node_affinity_must_by_setting() -> None:
    result = run_plan(
        [pod("a", "node1", on_hosts=["h0"])], PLACEMENTS, HOSTS, vm_host_mandatory=True
    )
    (rule,) = [o for o in result.clusters["domain-c1"].objects.values() if o.kind == "vm-host"]
    assert rule.mandatory


# Pods on one VM (node1 = vm1 unless said) asking for hosts; "must" unless the case says should.
MUST_HOST_CASES = [
    pytest.param(
        [("a", "node1", ["h0"]), ("b", "node1", ["h1"])],
        True,
        [("h0", ("vm1",), ("default/a",)), ("h1", ("vm1",), ("default/b",))],
        id="two-disjoint-must-sets-on-one-vm",
    ),
    pytest.param(
        [("a", "node1", ["h0", "h1"]), ("b", "node1", ["h1", "h2"])],
        True,
        [],
        id="overlapping-sets-leave-h1",
    ),
    pytest.param(
        [("a", "node1", ["h0"]), ("b", "node1", ["h1"])],
        False,
        [],
        id="should-rules-may-be-broken-so-no-conflict",
    ),
    pytest.param(
        [("a", "node1", ["h0"]), ("b", "node1", ["h1"]), ("c", "node4", ["h0"])],
        True,
        [("h0", ("vm1",), ("default/a",)), ("h1", ("vm1",), ("default/b",))],
        id="only-the-stranded-vm-is-named",
    ),
    pytest.param(
        [("a", "node1", ["h0", "h1"]), ("b", "node1", ["h1", "h2"]), ("c", "node1", ["h0", "h2"])],
        True,
        [
            ("h0,h1", ("vm1",), ("default/a",)),
            ("h0,h2", ("vm1",), ("default/c",)),
            ("h1,h2", ("vm1",), ("default/b",)),
        ],
        id="pairwise-overlapping-but-nothing-common-to-all",
    ),
    pytest.param(
        [("a", "node1", ["h0"]), ("b", "node2", ["h1"])],
        True,
        [],
        id="different-vms-different-hosts",
    ),
]


@pytest.mark.parametrize(("asked", "must", "expected"), MUST_HOST_CASES)
def test_a_vm_sent_by_must_rules_onto_host_sets_with_no_common_host_is_a_conflict(
    asked: list[tuple[str, str, list[str]]],
    must: bool,
    expected: list[tuple[str, tuple[str, ...], tuple[str, ...]]],
) -> None:
    pods = [pod(name, node, on_hosts=hosts) for name, node, hosts in asked]
    result = run_plan(pods, PLACEMENTS, HOSTS, vm_host_mandatory=must)
    cluster = result.clusters["domain-c1"]
    strength = "must" if must else "should"
    assert sorted((c.name, c.reason, c.vms, c.pods) for c in result.conflicts) == sorted(
        (
            object_name("vm-host", "domain-c1", f"hosts:{hosts}:{strength}", INSTALL),
            "no-common-host",
            vms,
            asking,
        )
        for hosts, vms, asking in expected
    )
    held_rules = {c.name for c in result.conflicts}
    assert held_rules <= cluster.held  # neither sent nor taken away...
    assert not held_rules & set(cluster.objects)
    sets = {tuple(hosts) for _, _, hosts in asked}
    assert len(cluster.held) == 3 * len(expected)  # ...with its two groups
    assert len([o for o in cluster.objects.values() if o.kind == "vm-host"]) == len(sets) - len(
        expected
    )


def spread_replicas(*nodes: str, **extra: Any) -> list[Any]:
    spread = extra.pop("spread", {})
    return [pod(f"web-{i}-{n}", n, WEB, spread=spread, **extra) for i, n in enumerate(nodes)]


_, ONE_HOST_IN_MAINTENANCE = topology()
ONE_HOST_IN_MAINTENANCE = {**ONE_HOST_IN_MAINTENANCE, "h2": host("h2", maintenance=True)}
SSD = {"disk": "ssd"}

# (replicas, hosts, the VM-VM anti-affinity rules planned). node<i> is on h<(i-1) mod 3>.
SPREAD_CASES = {
    "maxSkew 1, 3 replicas on 3 hosts: one rule": (
        spread_replicas("node1", "node2", "node3"),
        HOSTS,
        [("vm1", "vm2", "vm3")],
    ),
    "fewer replicas than hosts: one rule": (
        spread_replicas("node1", "node2"),
        HOSTS,
        [("vm1", "vm2")],
    ),
    "two replicas on one VM: the rule is over the VMs": (
        spread_replicas("node1", "node1", "node2"),
        HOSTS,
        [("vm1", "vm2")],
    ),
    "more replicas than hosts: balance, nothing for DRS": (
        spread_replicas("node1", "node2", "node3", "node4"),
        HOSTS,
        [],
    ),
    "a host in maintenance still counts: the rule is planned, held (below)": (
        spread_replicas("node1", "node2", "node3"),
        ONE_HOST_IN_MAINTENANCE,
        [("vm1", "vm2", "vm3")],
    ),
    "maxSkew 2: nothing": (
        spread_replicas("node1", "node2", "node3", spread={"maxSkew": 2}),
        HOSTS,
        [],
    ),
    "ScheduleAnyway: nothing": (
        spread_replicas("node1", "node2", spread={"whenUnsatisfiable": "ScheduleAnyway"}),
        HOSTS,
        [],
    ),
    "zone key: nothing": (
        spread_replicas("node1", "node2", key="topology.kubernetes.io/zone"),
        HOSTS,
        [],
    ),
    "hostname key without the opt-in: nothing": (
        spread_replicas("node1", "node2", key=HOSTNAME_KEY),
        HOSTS,
        [],
    ),
    "hostname key with the opt-in: read on the host": (
        spread_replicas(
            "node1", "node2", key=HOSTNAME_KEY, annotations={POD_PHYSICAL_ANTI_AFFINITY: "true"}
        ),
        HOSTS,
        [("vm1", "vm2")],
    ),
    "legacy host key": (
        spread_replicas("node1", "node2", key=LABEL_LEGACY_HOST),
        HOSTS,
        [("vm1", "vm2")],
    ),
    "nodeTaintsPolicy Honor may leave hosts out: nothing": (
        spread_replicas("node1", "node2", spread={"nodeTaintsPolicy": "Honor"}),
        HOSTS,
        [],
    ),
    "replica on a node outside this vCenter: nothing": (
        spread_replicas("node1", "node2", "elsewhere"),
        HOSTS,
        [],
    ),
}


@pytest.mark.parametrize("case", list(SPREAD_CASES))
def test_host_spread_becomes_anti_affinity_only_where_it_means_one_per_host(case: str) -> None:
    pods, hosts, expected = SPREAD_CASES[case]
    result = run_plan(pods, PLACEMENTS, hosts)
    assert rules(result) == expected
    assert not result.conflicts
    assert not result.untranslatable


def test_host_spread_rule_is_held_while_a_host_is_in_maintenance() -> None:
    result = run_plan(
        spread_replicas("node1", "node2", "node3"), PLACEMENTS, ONE_HOST_IN_MAINTENANCE
    )
    assert len(held(result)) == 1


def _on_ssd(pods: list[Any]) -> list[Any]:
    return [
        msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, node_selector=SSD))
        for p in pods
    ]


def test_host_spread_of_pods_with_a_node_selector_needs_node_affinity_ignored() -> None:
    """Honoured (the default), a nodeSelector may narrow the hosts the spread counts."""
    narrowed = _on_ssd(spread_replicas("node1", "node2"))
    assert rules(run_plan(narrowed, PLACEMENTS, HOSTS)) == []
    ignored = _on_ssd(spread_replicas("node1", "node2", spread={"nodeAffinityPolicy": "Ignore"}))
    assert rules(run_plan(ignored, PLACEMENTS, HOSTS)) == [("vm1", "vm2")]


def test_host_spread_and_anti_affinity_on_the_same_vms_are_one_rule() -> None:
    pods = [pod(f"web-{n}", n, WEB, apart_from=WEB, spread={}) for n in ("node1", "node2", "node3")]
    assert rules(run_plan(pods, PLACEMENTS, HOSTS)) == [("vm1", "vm2", "vm3")]


def test_the_rule_says_it_comes_from_the_spread() -> None:
    """`hostaffinity explain pod` prints a DRS rule's reason: it names the spread."""
    result = run_plan(spread_replicas("node1", "node2"), PLACEMENTS, HOSTS)
    (obj,) = result.clusters["domain-c1"].objects.values()
    assert obj.reason == (
        "topology spread in default: {app=web} over hostaffinity.io/esxi-host, maxSkew 1, "
        "DoNotSchedule, one replica per host"
    )
