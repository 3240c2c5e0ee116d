"""The fault campaign: its checker catches each invariant's breach in a forged history (fast),
and short campaigns over the whole system hold every invariant (the same entry point as
`python -m tests.campaign`)."""

from __future__ import annotations

import asyncio
import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import msgspec
import pytest
from pyVmomi import SoapAdapter, vim

from hostaffinity.admission_webhook.core.mutation import MutationSettings, plan_pod
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    DrsName,
    DrsOwnership,
    DrsRulesApplied,
    NodeLabelled,
    PodEvicted,
    TopologySnapshot,
)
from tests.campaign.checker import Result, check, first_breach
from tests.campaign.drs_writes import parse_reconfigure, touches
from tests.campaign.faults import Targets, schedule
from tests.campaign.history import (
    CAMPAIGN,
    RECONFIGURE,
    AdmissionCall,
    ApiRequest,
    Clock,
    DrsTouch,
    EventsRead,
    ExtenderFilter,
    Fault,
    FinalState,
    History,
    Instance,
    ProcessExit,
    StoredChange,
    VcenterWrite,
)
from tests.campaign.install import VCENTER_NAME
from tests.campaign.recording import Connections, VcenterProxy
from tests.campaign.snapshot import desired_drs
from tests.campaign.upgrade import UPGRADE
from tests.campaign.workload import anti_affinity
from tests.platform.bus_values import ESXI_HOST, OTHER_HOST, node_placement
from tests.platform.nats import free_listen_port

REPO = Path(__file__).resolve().parents[1]
HOSTNAME_KEY = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
LEADER, RIVAL = "host-101", "host-202"
INSTALL, OTHER = "campaign", "other-cluster"
RULE = str(DrsName("vm-anti-affinity", INSTALL, "0123456789ab"))
# The same workload's rule in the other install's cluster: the same digest, its own install.
OTHER_RULE = str(DrsName("vm-anti-affinity", OTHER, "0123456789ab"))
EVICT = "/api/v1/namespaces/default/pods/web1-a/eviction"


def _lease(holder: str) -> dict[str, Any]:
    return {
        "kind": "Lease",
        "metadata": {"name": "hostaffinity-descheduler", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder},
    }


def _pod(name: str, node: str, *, disrupted: bool = False) -> dict[str, Any]:
    conditions = [{"type": "DisruptionTarget", "status": "True"}] if disrupted else []
    anti = {"labelSelector": {"matchLabels": {"app": "web1"}}, "topologyKey": LABEL_ESXI_HOST}
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": {"app": "web1"},
            "ownerReferences": [{"name": "web1"}],
        },
        "spec": {
            "nodeName": node,
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti]}
            },
        },
        "status": {"conditions": conditions},
    }


def _opted_in(name: str, node: str = "") -> dict[str, Any]:
    """A StatefulSet pod as the user writes it: opted in, hostname anti-affinity."""
    anti = {"labelSelector": {"matchLabels": {"app": "db1"}}, "topologyKey": HOSTNAME_KEY}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "db1"},
                     "annotations": {POD_PHYSICAL_ANTI_AFFINITY: "true"}},
        "spec": {"containers": [{"name": "db", "image": "db:1"}],
                 "affinity": {"podAntiAffinity": {REQUIRED: [anti]}}},
    }  # fmt: skip
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _mutated(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the webhook's planner leaves it (its host-key twin, the host label)."""
    patched: dict[str, Any] = jsonpatch.apply_patch(
        pod, plan_pod(pod, MutationSettings()).operations
    )
    return patched


def _node(name: str, host: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {LABEL_ESXI_HOST: host}}}  # fmt: skip


def _pdb(allowed: int, disrupted: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web1", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web1"}}},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted or {}},
    }


def labelled(event_id: str, node: str, host: str) -> NodeLabelled:
    return NodeLabelled(
        id=event_id,
        occurred_at="",
        source="node-labeller",
        node=node,
        labels={LABEL_ESXI_HOST: host},
        version=1,
    )


def applied(event_id: str, rule: str) -> DrsRulesApplied:
    """The drs-translator's event on adding `rule` in cluster c1."""
    return DrsRulesApplied(
        id=event_id,
        occurred_at="",
        source="drs-translator",
        vcenter="vc",
        cluster_moid="c1",
        added=[rule],
    )


def healthy() -> History:
    """A small history in which every invariant holds: the descheduler's leader evicts one pod
    (charging its PDB), the drs-translator's leader writes one rule, the labeller labels."""
    history = History(seed=7, install=INSTALL, ready_at=0.5, lease_duration_s=2.0, cooldown_s=10.0)
    history.instances = {
        LEADER: Instance(LEADER, "descheduler-a", "descheduler", 0.0),
        RIVAL: Instance(RIVAL, "descheduler-b", "descheduler", 0.0),
        "host-303": Instance("host-303", "drs-translator-a", "drs-translator", 0.0),
        "host-404": Instance("host-404", "node-labeller-a", "node-labeller", 0.0),
    }
    drs_lease = _lease("host-303")
    drs_lease["metadata"]["name"] = "hostaffinity-drs-translator"
    node = {"kind": "Node", "metadata": {"name": "node-1", "labels": {LABEL_ESXI_HOST: "H1"}}}
    before = _pod("web1-a", "node-1")
    history.changes = [
        StoredChange(1.0, LEADER, 2, "leases", "ADDED", _lease(LEADER), None),
        StoredChange(1.0, "host-303", 3, "leases", "ADDED", drs_lease, None),
        StoredChange(1.1, CAMPAIGN, 4, "pods", "ADDED", before, None),
        StoredChange(1.2, CAMPAIGN, 5, "pdb", "ADDED", _pdb(1), None),
        StoredChange(
            1.3, "host-404", 6, "nodes", "MODIFIED", node, {"metadata": {"name": "node-1"}}
        ),
        StoredChange(2.0, LEADER, 7, "pdb", "MODIFIED", _pdb(0, {"web1-a": "now"}), _pdb(1)),
        StoredChange(
            2.0, LEADER, 8, "pods", "MODIFIED", _pod("web1-a", "node-1", disrupted=True), before
        ),
    ]
    history.requests = [ApiRequest(2.0, LEADER, "POST", EVICT, 201)]
    history.vcenter_writes = [
        VcenterWrite(2.5, "host-303", RECONFIGURE, "c1", (DrsTouch("add", RULE),))
    ]
    history.events = [
        (
            1,
            PodEvicted(
                id="e1",
                occurred_at="",
                source="descheduler",
                pod="default/web1-a",
                pod_uid="uid-web1-a",
                node="node-1",
                strategy="s",
                rule="r",
                result="evicted",
            ),
        ),
        (2, labelled("e2", "node-1", "H1")),
        (3, applied("e3", RULE)),
    ]
    history.exits = [
        ProcessExit(3.0, "descheduler-b", RIVAL, -9, by_campaign=True, lost_lease=False)
    ]
    sent = _opted_in("db1-0")
    history.admissions = [AdmissionCall(1.0, "default/db1-0", "patched", sent, _mutated(sent))]
    # The scheduler offered both nodes for db1-1 while db1-0 (twinned) ran on node-1's host,
    # nothing having moved for long: the extender passed node-2 only, as the engine does.
    history.extender_filters = [
        ExtenderFilter(
            9.0,
            _opted_in("db1-1"),
            ("node-1", "node-2"),
            ("node-2",),
            [_node("node-1", "H1"), _node("node-2", "H2")],
            [_mutated(_opted_in("db1-0", "node-1"))],
        )
    ]
    history.final = FinalState(
        node_labels={"node-1": {LABEL_ESXI_HOST: "H1"}, "node-2": {LABEL_ESXI_HOST: "H2"}},
        kv_hosts={"node-1": "host-1", "node-2": "host-2"},
        vm_hosts={"node-1": ("host-1", "H1"), "node-2": ("host-2", "H2")},
        schedulable={"node-1", "node-2"},
        pods=[
            _pod("web1-b", "node-1"),
            _pod("web1-c", "node-2"),
            _mutated(_opted_in("db1-0", "node-1")),
        ],
        drs={
            "c1": {RULE: {"name": RULE, "vm": ["vm-2", "vm-1"]}, "admin-rule-1": {"vm": ["vm-1"]}}
        },
        planned={"c1": {RULE: (("vm-1", "vm-2"), ())}},
        admin_rules={("c1", "admin-rule-1"): {"vm": ["vm-1"]}},
        readiness={"descheduler-a": True, "descheduler-b": True},
    )
    return history


def _broken(history: History) -> str:
    found = first_breach(check(history))
    assert found is not None, "the checker found nothing"
    return found[0].name


def test_a_healthy_history_holds_every_invariant() -> None:
    results = check(healthy())
    assert [r.breaches for r in results if r.breaches] == []
    # All but the upgrade's, which have nothing to check without one (upgraded() has).
    unchecked = [r.name for r in results if not r.checked]
    assert unchecked == ["legacy-rules-renamed-without-a-gap", "events-read-by-both-releases"]


def test_a_label_that_is_not_vcenters_is_caught() -> None:
    history = healthy()
    history.final.kv_hosts["node-2"] = "host-1"
    assert _broken(history) == "labels-and-kv-match-vcenter"


def test_a_rule_no_pod_asks_for_is_caught() -> None:
    history = healthy()
    history.final.planned["c1"] = {}
    assert _broken(history) == "drs-rules-match-pods"


def test_an_edited_admin_rule_is_caught() -> None:
    history = healthy()
    history.final.drs["c1"]["admin-rule-1"] = {"vm": ["vm-1", "vm-2"]}
    assert _broken(history) == "foreign-rules-untouched"


def test_two_anti_affine_replicas_on_one_host_with_a_free_host_are_caught() -> None:
    history = healthy()
    history.final.pods.append(_pod("web1-d", "node-1"))
    history.final.schedulable.add("node-3")
    history.final.vm_hosts["node-3"] = ("host-3", "H3")
    assert _broken(history) == "host-anti-affinity-held"


def test_opted_in_hostname_replicas_on_one_host_with_a_free_host_are_caught() -> None:
    """Admitted without their twin, read physically: the descheduler should have moved one."""
    history = healthy()
    history.final.pods += [_opted_in("db1-1", "node-1"), _opted_in("db1-2", "node-2")]
    history.final.schedulable.add("node-3")
    history.final.vm_hosts["node-3"] = ("host-3", "H3")
    assert _broken(history) == "host-anti-affinity-held"


def test_replicas_sharing_a_host_with_no_free_host_need_the_descheduler_s_event() -> None:
    history = healthy()
    history.final.pods.append(_pod("web1-d", "node-1"))
    assert _broken(history) == "host-anti-affinity-held"
    history.final.kube_events.append(
        {"reason": "NotDescheduled", "involvedObject": {"name": "web1-d"}}
    )
    assert first_breach(check(history)) is None


def test_an_admission_the_webhook_would_not_make_is_caught() -> None:
    history = healthy()
    sent = _opted_in("db1-1")
    history.admissions.append(AdmissionCall(5.0, "default/db1-1", "patched", sent, sent))
    assert _broken(history) == "admission-as-the-webhook-plans"


def test_a_failed_webhook_call_is_caught_unless_a_replica_was_being_killed() -> None:
    history = healthy()
    sent = _opted_in("db1-1")
    history.admissions.append(
        AdmissionCall(5.0, "default/db1-1", "failed: ConnectionRefusedError", sent, sent)
    )
    assert _broken(history) == "admission-as-the-webhook-plans"
    history.faults.append(Fault(4.5, 8.0, "kill-replica", "admission-webhook-a"))
    assert first_breach(check(history)) is None
    history.faults.clear()
    history.ready_at = 6.0  # the call came while the system was still starting
    assert first_breach(check(history)) is None


def test_a_twinless_opted_in_pod_without_its_event_is_caught() -> None:
    history = healthy()
    history.final.pods.append(_opted_in("db1-1", "node-2"))
    assert _broken(history) == "twinless-pods-reported"
    history.final.kube_events.append(
        {"reason": "AdmittedWithoutHostTerms",
         "involvedObject": {"name": "db1-1", "namespace": "default"}}
    )  # fmt: skip
    assert first_breach(check(history)) is None


def test_an_extender_pass_the_engine_refuses_on_a_still_cluster_is_caught() -> None:
    history = healthy()
    call = history.extender_filters[0]
    history.extender_filters[0] = ExtenderFilter(
        call.t, call.pod, call.offered, ("node-1", "node-2"), call.nodes, call.pods
    )
    assert _broken(history) == "extender-agrees-with-engine"
    # Unless db1-0 was bound on that host a moment before: the extender may not know it yet.
    history.changes.append(
        StoredChange(8.0, CAMPAIGN, 30, "pods", "MODIFIED", call.pods[0], _opted_in("db1-0"))
    )
    assert first_breach(check(history)) is None


def test_an_extender_refusal_the_engine_passes_is_caught_but_its_one_host_hold_is_not() -> None:
    history = healthy()
    call = history.extender_filters[0]
    nodes = [*call.nodes, _node("node-3", "H2")]
    offered = (*call.offered, "node-3")

    def answered(passed: tuple[str, ...]) -> History:
        history.extender_filters[0] = ExtenderFilter(
            call.t, call.pod, offered, passed, nodes, call.pods
        )
        return history

    # The engine passes node-2 and node-3 (host H2): held on H2, both must pass.
    assert first_breach(check(answered(("node-2", "node-3")))) is None
    assert _broken(answered(("node-2",))) == "extender-agrees-with-engine"
    assert _broken(answered(())) == "extender-agrees-with-engine"
    # With db1-0 gone, the engine passes all three: holding H1 (node-1 alone) refuses H2's nodes.
    history.extender_filters[0] = ExtenderFilter(call.t, call.pod, offered, ("node-1",), nodes, [])
    assert first_breach(check(history)) is None


def test_a_second_eviction_for_one_violation_is_caught() -> None:
    history = healthy()
    again = EVICT.replace("web1-a", "web1-b")
    history.changes.append(
        StoredChange(3.0, CAMPAIGN, 19, "pods", "ADDED", _pod("web1-b", "n"), None)
    )
    history.requests.append(ApiRequest(4.0, LEADER, "POST", again, 201))
    history.changes.append(
        StoredChange(4.0, LEADER, 20, "leases", "MODIFIED", _lease(LEADER), None)
    )
    assert _broken(history) == "one-eviction-per-violation"


def test_a_statefulset_pod_evicted_again_is_caught_but_its_successor_of_the_same_name_is_not() -> (
    None
):
    history = healthy()
    later = history.cooldown_s + 5.0  # past the workload's cooldown
    history.changes.append(
        StoredChange(later, LEADER, 20, "leases", "MODIFIED", _lease(LEADER), None)
    )
    history.requests.append(ApiRequest(later, LEADER, "POST", EVICT, 201))
    assert _broken(history) == "one-eviction-per-violation"  # the same pod (uid) again
    successor = _pod("web1-a", "node-1")
    successor["metadata"]["uid"] = "uid-web1-a-2"
    history.changes.append(StoredChange(later - 1, CAMPAIGN, 19, "pods", "ADDED", successor, None))
    assert first_breach(check(history)) is None


def test_an_eviction_past_an_exhausted_pdb_is_caught() -> None:
    history = healthy()
    pdb = history.changes[5]
    history.changes[5] = StoredChange(
        pdb.t, pdb.actor, pdb.rv, pdb.storage, pdb.type, pdb.obj, _pdb(0)
    )
    assert _broken(history) == "no-eviction-past-a-pdb"


def test_an_eviction_by_a_replica_that_lost_the_lease_is_caught() -> None:
    history = healthy()
    history.changes.insert(
        2, StoredChange(1.5, RIVAL, 9, "leases", "MODIFIED", _lease(RIVAL), None)
    )
    assert _broken(history) == "writes-only-by-the-leader"


def test_an_eviction_long_after_the_last_renewal_is_caught() -> None:
    history = healthy()
    history.requests[0] = ApiRequest(3.5, LEADER, "POST", EVICT, 429)
    assert _broken(history) == "writes-only-by-the-leader"


def test_a_lost_event_is_caught() -> None:
    history = healthy()
    history.events = [e for e in history.events if not isinstance(e[1], DrsRulesApplied)]
    assert _broken(history) == "one-event-per-change"


def test_an_event_stored_twice_is_caught() -> None:
    history = healthy()
    history.events.append((4, copy.deepcopy(history.events[0][1])))
    assert _broken(history) == "one-event-per-change"


def test_a_replica_left_not_ready_is_caught() -> None:
    history = healthy()
    history.final.readiness["descheduler-b"] = False
    assert _broken(history) == "services-ready"


def test_a_crash_is_caught_but_a_lost_lease_is_not() -> None:
    history = healthy()
    history.exits.append(
        ProcessExit(5.0, "descheduler-a", LEADER, 1, by_campaign=False, lost_lease=True)
    )
    assert first_breach(check(history)) is None
    history.exits.append(
        ProcessExit(6.0, "descheduler-a", LEADER, 1, by_campaign=False, lost_lease=False)
    )
    assert _broken(history) == "no-crash"


def two_installs() -> History:
    """healthy()'s install beside another one on the same vCenter, running the same workload:
    its drs-translator wrote its own rule for it (OTHER_RULE, on the other VMs) into the same
    cluster, and its labeller labelled its node."""
    history = healthy()
    other = History(
        seed=7, name="b", install=OTHER, ready_at=0.5, lease_duration_s=2.0, cooldown_s=10.0
    )
    translator = "host-505"
    other.instances = {
        translator: Instance(translator, "b-drs-translator-a", "drs-translator", 0.0),
        "host-606": Instance("host-606", "b-node-labeller-a", "node-labeller", 0.0),
    }
    lease = _lease(translator)
    lease["metadata"]["name"] = "hostaffinity-drs-translator"
    node = {"kind": "Node", "metadata": {"name": "b-node-1", "labels": {LABEL_ESXI_HOST: "H2"}}}
    other.changes = [
        StoredChange(1.0, translator, 2, "leases", "ADDED", lease, None),
        StoredChange(
            1.3, "host-606", 3, "nodes", "MODIFIED", node, {"metadata": {"name": "b-node-1"}}
        ),
    ]
    other.vcenter_writes = [
        VcenterWrite(2.6, translator, RECONFIGURE, "c1", (DrsTouch("add", OTHER_RULE),))
    ]
    other.events = [(1, labelled("b1", "b-node-1", "H2")), (2, applied("b2", OTHER_RULE))]
    history.final.drs["c1"][OTHER_RULE] = {"name": OTHER_RULE, "vm": ["vm-4", "vm-3"]}
    history.final.vm_hosts["b-node-1"] = ("host-2", "H2")
    other.final = FinalState(
        node_labels={"b-node-1": {LABEL_ESXI_HOST: "H2"}},
        kv_hosts={"b-node-1": "host-2"},
        vm_hosts=history.final.vm_hosts,
        schedulable={"b-node-1"},
        drs=history.final.drs,
        planned={"c1": {OTHER_RULE: (("vm-3", "vm-4"), ())}},
        readiness={"b-drs-translator-a": True, "b-node-labeller-a": True},
    )
    history.others = [other]
    return history


def _result(history: History, name: str, install: str = "a") -> Result:
    return next(r for r in check(history) if (r.name, r.install) == (name, install))


def test_two_installs_with_the_same_workload_hold_every_invariant_each_with_its_own_rule() -> None:
    """Each install's rule is checked against its own plan alone: the other's rule for the same
    workload (same digest) is not one "no pod asks for"."""
    history = two_installs()
    results = check(history)
    assert [r.breaches for r in results if r.breaches] == []
    for install in ("a", "b"):
        assert _result(history, "drs-rules-match-pods", install).checked == 1
    assert _result(history, "installs-keep-to-their-own").checked == 4  # 2 writes, 2 names
    # The webhook's, the extender's and the admin's invariants are the first install's alone.
    assert {r.name for r in results if r.install == "b"} == {
        "labels-and-kv-match-vcenter",
        "drs-rules-match-pods",
        "host-anti-affinity-held",
        "one-eviction-per-violation",
        "no-eviction-past-a-pdb",
        "writes-only-by-the-leader",
        "one-event-per-change",
        "services-ready",
        "no-crash",
    }


def test_an_install_that_edits_another_install_s_rule_is_caught() -> None:
    """Even when the other install puts it back before the end (the final state is right)."""
    history = two_installs()
    history.vcenter_writes.append(
        VcenterWrite(2.8, "host-303", RECONFIGURE, "c1", (DrsTouch("edit", OTHER_RULE),))
    )
    assert _broken(history) == "installs-keep-to-their-own"
    (breach,) = _result(history, "installs-keep-to-their-own").breaches
    assert "install b's" in breach.message
    assert OTHER_RULE in breach.message


def test_an_install_that_removes_another_s_rule_or_touches_an_admin_s_is_caught() -> None:
    for touched in (DrsTouch("remove", RULE), DrsTouch("edit", "admin-rule-1")):
        history = two_installs()
        history.others[0].vcenter_writes.append(
            VcenterWrite(2.9, "host-505", RECONFIGURE, "c1", (touched,))
        )
        assert _broken(history) == "installs-keep-to-their-own", touched


def test_an_install_s_rules_that_are_not_its_plan_are_caught_whatever_the_other_holds() -> None:
    """The first install lost its rule while the other's rule for the same workload stands; and
    the other planned nothing where it holds a rule."""
    history = two_installs()
    del history.final.drs["c1"][RULE]
    assert _broken(history) == "drs-rules-match-pods"
    breaches = _result(history, "drs-rules-match-pods").breaches
    assert [b.message for b in breaches] == [f"c1: {RULE} planned but missing in vCenter"]
    assert not _result(history, "drs-rules-match-pods", "b").breaches
    history = two_installs()
    history.others[0].final.planned["c1"] = {}
    assert _broken(history) == "drs-rules-match-pods"
    assert not _result(history, "drs-rules-match-pods").breaches
    (breach,) = _result(history, "drs-rules-match-pods", "b").breaches
    assert OTHER_RULE in breach.message


def test_a_rule_named_for_no_install_is_caught() -> None:
    history = two_installs()
    stranger = str(DrsName("vm-anti-affinity", "stranger", "0123456789ab"))
    history.final.drs["c1"][stranger] = {"name": stranger, "vm": ["vm-1"]}
    assert _broken(history) == "installs-keep-to-their-own"


# The first install's rule as its previous release (0.1.0) named it: the same digest, no install.
LEGACY = str(DrsName("vm-anti-affinity", None, "0123456789ab"))
NEW_TRANSLATOR = "host-313"


def upgraded() -> History:
    """two_installs() with the first install upgraded: its previous release's drs-translator
    (host-303) made the legacy rule, and this tree's (host-313, the Lease after it) renamed it
    in place, one edit by the rule's key touching both names."""
    history = two_installs()
    history.instances["host-303"] = Instance(
        "host-303", "drs-translator-a", "drs-translator", 0.0, previous_release=True
    )
    history.instances[NEW_TRANSLATOR] = Instance(
        NEW_TRANSLATOR, "drs-translator-a", "drs-translator", 2.55
    )
    lease = _lease(NEW_TRANSLATOR)
    lease["metadata"]["name"] = "hostaffinity-drs-translator"
    history.changes.append(StoredChange(2.6, NEW_TRANSLATOR, 9, "leases", "MODIFIED", lease, None))
    ids = frozenset(event.id for _, event in history.events)
    history.events_read = {"0.1.0": EventsRead(ids), "this tree": EventsRead(ids | {"later"})}
    history.vcenter_writes = [
        VcenterWrite(2.5, "host-303", RECONFIGURE, "c1", (DrsTouch("add", LEGACY),)),
        VcenterWrite(
            2.7,
            NEW_TRANSLATOR,
            RECONFIGURE,
            "c1",
            (DrsTouch("edit", LEGACY), DrsTouch("edit", RULE)),
        ),
    ]
    return history


def test_an_upgrade_that_renames_the_previous_release_s_rule_in_place_holds() -> None:
    history = upgraded()
    assert [r.breaches for r in check(history) if r.breaches] == []
    assert _result(history, "legacy-rules-renamed-without-a-gap").checked == 1
    assert _result(history, "events-read-by-both-releases").checked == 2
    assert _result(history, "installs-keep-to-their-own").checked == 6  # 4 touches, 2 names


def test_a_previous_release_s_rule_removed_instead_of_renamed_is_caught() -> None:
    """Removed and made again under the new name: the VMs had no rule in between, though the
    final state is right."""
    history = upgraded()
    history.vcenter_writes[1:] = [
        VcenterWrite(2.7, NEW_TRANSLATOR, RECONFIGURE, "c1", (DrsTouch("remove", LEGACY),)),
        VcenterWrite(2.8, NEW_TRANSLATOR, RECONFIGURE, "c1", (DrsTouch("add", RULE),)),
    ]
    assert _broken(history) == "legacy-rules-renamed-without-a-gap"
    (breach,) = _result(history, "legacy-rules-renamed-without-a-gap").breaches
    assert LEGACY in breach.message


def test_a_legacy_rule_not_of_the_install_s_previous_release_or_left_unrenamed_is_caught() -> None:
    """Another install's process touching the first install's legacy rule; this tree's process
    touching a legacy rule its previous release never made (a pre-0.2.0 install's elsewhere);
    and a legacy rule still in vCenter at the end."""
    history = upgraded()
    history.others[0].vcenter_writes.append(
        VcenterWrite(2.9, "host-505", RECONFIGURE, "c1", (DrsTouch("edit", LEGACY),))
    )
    assert _broken(history) == "installs-keep-to-their-own"
    history = upgraded()
    stranger = str(DrsName("vm-anti-affinity", None, "ba9876543210"))
    history.vcenter_writes.append(
        VcenterWrite(2.9, NEW_TRANSLATOR, RECONFIGURE, "c1", (DrsTouch("remove", stranger),))
    )
    assert _broken(history) == "installs-keep-to-their-own"
    history = upgraded()
    history.final.drs["c1"][LEGACY] = {"name": LEGACY, "vm": ["vm-1"]}
    assert _broken(history) == "installs-keep-to-their-own"


def test_an_event_one_release_cannot_read_is_caught() -> None:
    history = upgraded()
    first = history.events[0][1].id
    history.events_read["0.1.0"] = EventsRead(history.events_read["0.1.0"].ids - {first})
    assert _broken(history) == "events-read-by-both-releases"
    (breach,) = _result(history, "events-read-by-both-releases").breaches
    assert "0.1.0" in breach.message
    assert first in breach.message
    history = upgraded()
    history.events_read["this tree"] = EventsRead(error="exit 1: unknown field")
    assert _broken(history) == "events-read-by-both-releases"


def test_the_upgrade_is_planned_once_per_seed_beside_the_same_other_faults() -> None:
    targets = Targets(("node-labeller-a",), (("nats-0",),), ("node-labeller",), ("api",))
    plain = schedule(3, 1.0, targets)
    upgrading = schedule(3, 1.0, targets, upgrade=True)
    upgrades = [f for f in upgrading if f.kind == UPGRADE]
    assert len(upgrades) == 1
    assert 3.0 <= upgrades[0].at <= 60 * 0.8 * 0.3
    assert [f for f in upgrading if f.kind != UPGRADE] == plain
    assert upgrading == schedule(3, 1.0, targets, upgrade=True)


def test_the_other_install_s_invariants_are_checked_on_its_own_history() -> None:
    """Its label, its events and its Lease: from its history, not the first install's."""
    history = two_installs()
    history.others[0].final.kv_hosts["b-node-1"] = "host-1"
    assert _broken(history) == "labels-and-kv-match-vcenter"
    assert not _result(history, "labels-and-kv-match-vcenter").breaches
    history = two_installs()
    history.others[0].events.pop()  # its drs.rules.applied
    assert _result(history, "one-event-per-change", "b").breaches
    assert not _result(history, "one-event-per-change").breaches
    history = two_installs()
    history.others[0].changes.pop(0)  # its translator never held its Lease
    assert _result(history, "writes-only-by-the-leader", "b").breaches


def reconfigure_body(spec: Any) -> bytes:
    """The SOAP body pyVmomi sends for `ReconfigureComputeResource_Task(spec, modify=True)`."""
    stub = SoapAdapter.SoapStubAdapter(host="127.0.0.1", port=1, version="vim.version.version9")
    cluster = vim.ClusterComputeResource("domain-c7", stub)
    method = cluster._GetMethodInfo("ReconfigureEx")
    body: bytes = stub.SerializeRequest(cluster, method, [spec, True])
    return body


def mixed_spec() -> Any:
    """A rule removed and one edited (renamed) by key, one added; a group removed and added."""
    anti = vim.cluster.AntiAffinityRuleSpec
    vms = [vim.VirtualMachine("vm-1")]
    return vim.cluster.ConfigSpecEx(
        rulesSpec=[
            vim.cluster.RuleSpec(operation="remove", removeKey=5),
            vim.cluster.RuleSpec(operation="edit", info=anti(key=3, name="r3-new", vm=vms)),
            vim.cluster.RuleSpec(operation="add", info=anti(name="r-added", vm=vms)),
        ],
        groupSpec=[
            vim.cluster.GroupSpec(operation="remove", removeKey="g1"),
            vim.cluster.GroupSpec(operation="add", info=vim.cluster.VmGroup(name="g2", vm=vms)),
        ],
    )


def test_a_reconfigure_touches_the_rules_its_keys_named_when_it_was_sent() -> None:
    reconfigure = parse_reconfigure(reconfigure_body(mixed_spec()))
    assert reconfigure is not None
    assert reconfigure.cluster == "domain-c7"
    groups = (DrsTouch("remove", "g1"), DrsTouch("add", "g2"))
    assert touches(reconfigure, {5: "r5", 3: "r3-old", 9: "r9"}) == (
        (
            DrsTouch("remove", "r5"),
            DrsTouch("edit", "r3-old"),
            DrsTouch("edit", "r3-new"),
            DrsTouch("add", "r-added"),
            *groups,
        ),
        0,
    )
    # vCenter away: the keys stay unresolved; keys it does not hold touch nothing.
    rest = (DrsTouch("edit", "r3-new"), DrsTouch("add", "r-added"), *groups)
    assert touches(reconfigure, None) == (rest, 2)
    assert touches(reconfigure, {}) == (rest, 0)
    assert parse_reconfigure(b"<RetrieveProperties/>") is None


async def test_the_vcenter_proxy_notes_a_reconfigure_and_lets_every_request_through_whole() -> None:
    """Pipelined requests, sent in small pieces: each reaches vCenter byte for byte, the
    reconfigure after its rule keys were asked about."""
    received = bytearray()
    done = asyncio.Event()
    body = reconfigure_body(mixed_spec())
    requests = (
        b"GET /sdk/vimServiceVersions.xml HTTP/1.1\r\nHost: vc\r\n\r\n"
        + b"POST /sdk HTTP/1.1\r\nHost: vc\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while len(received) < len(requests) and (data := await reader.read(1024)):
            received.extend(data)
        done.set()
        writer.close()

    asked: list[str] = []

    async def rule_names(cluster: str) -> dict[int, str]:
        asked.append(cluster)
        return {5: "r5"}

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    history = History()
    proxy = VcenterProxy(
        ("127.0.0.1", server.sockets[0].getsockname()[1]),
        Connections(),
        lambda: "host-1",
        history,
        Clock(),
        rule_names,
    )
    await proxy.start()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        for start in range(0, len(requests), 700):
            writer.write(requests[start : start + 700])
            await writer.drain()
        await asyncio.wait_for(done.wait(), 10)
        writer.close()
    finally:
        await proxy.stop()
        server.close()
    assert bytes(received) == requests
    assert asked == ["domain-c7"]
    (write,) = history.vcenter_writes
    assert (write.actor, write.cluster, write.unresolved) == ("host-1", "domain-c7", 0)
    assert [t.name for t in write.touched] == ["r5", "r3-new", "r-added", "g1", "g2"]


def two_workloads_apart_on_two_vms() -> tuple[list[dict[str, Any]], TopologySnapshot]:
    """web and worker, each with one replica on node-1 and one on node-2 (two hosts): the two
    groups are kept apart on the same two VMs, so one rule stands for both."""
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{app}-{node}", "namespace": "default", "labels": {"app": app}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "registry.invalid/pause:3"}],
                "affinity": anti_affinity(app, LABEL_ESXI_HOST),
            },
        }
        for app in ("web", "worker")
        for node in ("node-1", "node-2")
    ]
    nodes = {
        node: node_placement(node, host.moid, vcenter=VCENTER_NAME)
        for node, host in (("node-1", ESXI_HOST), ("node-2", OTHER_HOST))
    }
    hosts = {
        host.moid: msgspec.structs.replace(host, vcenter=VCENTER_NAME)
        for host in (ESXI_HOST, OTHER_HOST)
    }
    return pods, TopologySnapshot(nodes=dict(nodes), hosts=dict(hosts))


def test_the_planned_rule_of_groups_on_the_same_vms_keeps_the_name_we_hold() -> None:
    """The translator keeps a rule through another group's arrival on its VMs (`Planning`'s
    `existing`). The checker planned without our ownership records, so such a rule read as one
    no pod asks for, beside one planned but missing (seed 5, and a CI run of seed 2)."""
    pods, topology = two_workloads_apart_on_two_vms()
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}]
    (unrecorded,) = (
        desired_drs(INSTALL, namespaces, pods, topology, []).clusters["domain-c7"].objects
    )
    for name in names_of_the_two_groups(namespaces, pods, topology):
        record = DrsOwnership(
            vcenter=VCENTER_NAME, cluster_moid="domain-c7", name=name, kind="vm-anti-affinity"
        )
        desired = desired_drs(INSTALL, namespaces, pods, topology, [record])
        assert list(desired.clusters["domain-c7"].objects) == [name]
    assert unrecorded in names_of_the_two_groups(namespaces, pods, topology)


def names_of_the_two_groups(
    namespaces: list[dict[str, Any]], pods: list[dict[str, Any]], topology: TopologySnapshot
) -> set[str]:
    """The rule each workload alone would have."""
    names: set[str] = set()
    for app in ("web", "worker"):
        alone = [p for p in pods if p["metadata"]["labels"]["app"] == app]
        names |= set(
            desired_drs(INSTALL, namespaces, alone, topology, []).clusters["domain-c7"].objects
        )
    assert len(names) == 2
    return names


def test_a_listen_port_is_never_handed_out_twice() -> None:
    """The campaign chooses every replica's ports before starting any, and a replica restarts
    on its own: a port handed out must not be chosen again while it is unbound (CI once gave a
    webhook replica a port a nats-server of the same campaign then held)."""
    ports = [free_listen_port() for _ in range(600)]
    assert len(set(ports)) == len(ports)


def test_a_seed_replays_its_fault_schedule_over_both_installs() -> None:
    targets = Targets(
        replicas=("b-descheduler-a", "descheduler-a", "descheduler-b", "node-labeller-a"),
        buses=(("nats-0", "nats-1", "nats-2"), ("b-nats",)),
        services=("descheduler", "node-labeller", "b-descheduler", "b-node-labeller"),
        apis=("api", "b-api"),
    )
    assert schedule(11, 1.0, targets) == schedule(11, 1.0, targets)
    assert schedule(11, 1.0, targets) != schedule(12, 1.0, targets)
    hit = {f.target for f in schedule(11, 10.0, targets)}
    known = {*targets.replicas, *(s for bus in targets.buses for s in bus), *targets.services}
    assert hit <= known | set(targets.apis) | {""}
    assert any(t.startswith("b-") for t in hit)
    assert any(t and not t.startswith("b-") for t in hit)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("seed", "upgrade"),
    [(1, False), (2, False), (1, True), (4, True)],
    ids=["seed-1", "seed-2", "upgrade-seed-1", "upgrade-seed-4"],
)
def test_a_short_campaign_holds_every_invariant(seed: int, upgrade: bool, tmp_path: Path) -> None:
    """With `upgrade`, the first install starts on the previous release (built from its tag)
    and is rolled onto this tree's under the faults."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.campaign",
            "--seed",
            str(seed),
            "--minutes",
            "1",
            *(["--upgrade"] if upgrade else []),
            "--workdir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert lines[-1].endswith("all invariants held"), run.stdout
    if upgrade:  # it happened, and the previous release's rules were renamed under watch
        assert "'upgrade': 1" in run.stdout, run.stdout
        renamed = re.search(r"legacy-rules-renamed-without-a-gap \[a\]: (\d+) checked", run.stdout)
        assert renamed is not None, run.stdout
        assert int(renamed[1]) >= 1, run.stdout


def soak_rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The soak report's table: (process, measure) -> its cells, the verdict last."""
    lines = stdout.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("soak: ")) + 3
    rows = [line.removeprefix("| ").removesuffix(" |").split(" | ") for line in lines[start:]]
    return {(row[0], row[1]): row[2:] for row in rows if len(row) > 2}


@pytest.mark.timeout(480)
def test_a_short_soak_samples_every_process_and_bus_and_judges_each_series(
    tmp_path: Path,
) -> None:
    """Two minutes of the steady workload under light faults, sampled every 20 s after a 40 s
    warm-up: every replica, nats-server and vcsim has real figures at each sampling, each bus
    its consumers and KV keys, and each series its verdict, a drift named on a line of its
    own. Two minutes cannot tell a leak from a history filling up: the hour's soak judges the
    system (docs/reliability.md); this one runs the sampler and the rule on a real system."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.campaign",
            "--seed",
            "3",
            "--minutes",
            "2",
            "--workdir",
            str(tmp_path),
            "--soak",
            "--sample-every",
            "20s",
            "--warmup",
            "40s",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=460,
        check=False,
    )
    print(run.stdout)  # the report, to read with -s
    assert "all invariants held" in run.stdout, run.stdout + run.stderr[-3000:]
    rows = soak_rows(run.stdout)
    for process in ("descheduler-a", "admission-webhook-b", "b-node-labeller-a", "nats-0"):
        rss = [float(v.lstrip("↺")) for v in rows[(process, "rss MiB")][:-1] if v != "-"]
        assert rss, run.stdout
        assert min(rss) > 1, run.stdout
    for process in ("b-nats", "vcsim"):
        assert len(rows[(process, "fds")]) == 7 + 1, run.stdout  # at 0, 20, ... 120 s; verdict
    for bus in ("bus a", "bus b"):
        assert float(rows[(bus, "kv-keys hostaffinity-topology")][-2]) > 0, run.stdout
        assert float(rows[(bus, "consumers KV_hostaffinity-topology")][-2]) >= 1, run.stdout
    drifting = {
        f"{process} {measure}" for (process, measure), r in rows.items() if r[-1] == "DRIFTS"
    }
    named = {
        line.removeprefix("soak: DRIFT: ").split(" rose at every sample")[0]
        for line in run.stdout.splitlines()
        if line.startswith("soak: DRIFT: ")
    }
    assert {r[-1] for r in rows.values()} <= {"bounded", "DRIFTS", "shown"}, run.stdout
    assert named == drifting, run.stdout
    assert run.returncode == (1 if drifting else 0), run.stdout + run.stderr[-3000:]
