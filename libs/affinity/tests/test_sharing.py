"""What replicas have in common is kept once: compiled terms, spreads, workload, key.

The index keeps every assigned pod's compiled terms and spreads; at 300,000 pods a copy per pod
was most of its memory. Sharing must never change a decision (the other tests pin those), so
these pin only the sharing itself, where it must stop, and the bound that keeps a churning
cluster from growing the caches.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import compile_pod_terms
from hostaffinity.affinity.model import Pod, decode_pod
from hostaffinity.affinity.sharing import DEFAULT_CAPACITY, Interner, with_shared_fields
from hostaffinity.affinity.topology_spread import compile_spread_constraints
from hostaffinity.affinity.workloads import workload_of
from hostaffinity.schema.names import LABEL_ESXI_HOST, LABEL_KUBEVIRT_VMI_UID
from tests.platform.builders.affinity import pod, replica, required, spread, term


def _web(name: str, app: str = "web", namespace: str = "shop", **labels: str) -> Pod:
    """A replica with a hostname anti-affinity and a host spread, both on `app`."""
    selector: dict[str, Any] = {"matchLabels": {"app": app}}
    return pod(
        name,
        namespace=namespace,
        labels={"app": app, **labels},
        node_name="node-1",
        affinity=required("podAntiAffinity", term("kubernetes.io/hostname", selector)),
        spreads=[spread(LABEL_ESXI_HOST, selector, matchLabelKeys=["tier"])],
    )


def test_replicas_with_equal_rules_share_one_compiled_object() -> None:
    first, second = _web("web-1"), _web("web-2")
    assert compile_pod_terms(first) is compile_pod_terms(second)
    assert compile_spread_constraints(first) is compile_spread_constraints(second)


def test_index_records_of_replicas_share_terms_spreads_and_workload() -> None:
    index = ClusterIndex()
    owner = ("ReplicaSet", "web-7c9f")
    for name in ("web-7c9f-a", "web-7c9f-b"):
        index.upsert_pod(
            replica(
                name,
                "node-1",
                owner=owner,
                labels={"app": "web", "pod-template-hash": "7c9f"},
                affinity=required("podAntiAffinity", term("zone", {"matchLabels": {"app": "web"}})),
                spreads=[spread(LABEL_ESXI_HOST, {"matchLabels": {"app": "web"}})],
            )
        )
    first, second = (index.pod("shop/web-7c9f-a"), index.pod("shop/web-7c9f-b"))
    assert first is not None
    assert second is not None
    assert first.terms
    assert first.terms is second.terms
    assert first.spreads
    assert first.spreads is second.spreads
    assert first.workload is second.workload
    assert str(first.workload) == "Deployment/shop/web"


def test_pods_whose_compiled_rules_differ_do_not_share() -> None:
    base = _web("web-9")
    other_app = _web("api-1", app="api")
    assert compile_pod_terms(other_app) != compile_pod_terms(base)
    assert compile_spread_constraints(other_app) != compile_spread_constraints(base)
    # A term without namespaces covers its own pod's namespace.
    assert compile_pod_terms(_web("web-1", namespace="cart")) != compile_pod_terms(base)
    # matchLabelKeys adds the pod's own tier to its spread's selector.
    gold = compile_spread_constraints(_web("web-1", tier="gold"))
    assert gold != compile_spread_constraints(base)
    assert "tier=gold" in gold[0].selector.describe()


def test_a_vm_pods_physical_terms_stay_its_own() -> None:
    """A virt-launcher pod's physical reading leaves its own VM out: never shared across VMs."""
    annotations = {"hostaffinity.io/physical-anti-affinity": "true"}
    launchers = [
        pod(
            f"virt-launcher-{vm}",
            labels={"app": "db", LABEL_KUBEVIRT_VMI_UID: vm},
            annotations=annotations,
            affinity=required(
                "podAntiAffinity",
                term("kubernetes.io/hostname", {"matchLabels": {"app": "db"}}),
            ),
        )
        for vm in ("uid-a", "uid-b")
    ]
    first, second = (compile_pod_terms(p) for p in launchers)
    assert first != second
    assert any("uid-a" in r.values for t in first.required_anti for r in t.selector.requirements)


def test_pod_keys_are_one_string_for_every_asker() -> None:
    assert _web("web-1").key is _web("web-1").key


def test_workload_of_replicas_is_one_object() -> None:
    labels = {"pod-template-hash": "5d8f7"}
    first = workload_of(replica("web-5d8f7-a", labels=labels))
    assert first is workload_of(replica("web-5d8f7-b", labels=labels))


def test_the_caches_stay_bounded_in_a_churning_cluster() -> None:
    """More distinct workloads than the bound: the oldest are let go, the newest still shared."""
    pods = [_web(f"app-{n}-1", app=f"app-{n}") for n in range(DEFAULT_CAPACITY + 10)]
    kept = [compile_spread_constraints(p) for p in pods]
    assert compile_spread_constraints(_web("again", app="app-0")) is not kept[0]
    assert compile_spread_constraints(_web("again", app="app-0")) == kept[0]
    newest = f"app-{DEFAULT_CAPACITY + 9}"
    assert compile_spread_constraints(_web("again", app=newest)) is kept[-1]


def test_interner_lets_the_least_recently_used_go_first() -> None:
    interner: Interner[tuple[str, ...], tuple[str, ...]] = Interner(capacity=2)
    a, b = ("a",), ("b",)
    assert interner.share(a, a) is a
    assert interner.share(b, b) is b
    again = tuple(["a"])
    assert interner.share(again, again) is a  # a is now the most recently used
    c = ("c",)
    interner.share(c, c)  # b goes
    assert len(interner) == 2
    later_b = tuple(["b"])
    assert interner.share(later_b, later_b) is later_b
    later_a = tuple(["a"])
    assert interner.share(later_a, later_a) is later_a  # a went when b came back


def test_interner_needs_room_for_one_value() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Interner(capacity=0)


def test_decoded_structs_share_fields_with_equal_json_and_intern_strings() -> None:
    first, second, other = (
        with_shared_fields(p.metadata, ("labels", "namespace"))
        for p in (_web("web-1"), _web("web-2"), _web("web-3", tier="gold"))
    )
    assert first.labels is second.labels
    assert other.labels is not first.labels
    assert other.labels == {"app": "web", "tier": "gold"}
    assert first.namespace is second.namespace
    assert with_shared_fields(second, ("labels",)) is second  # nothing to replace: itself


def _replica_json(name: str, template_hash: str) -> bytes:
    """A ReplicaSet's pod as kube-apiserver serves it: what its replicas repeat (labels,
    ownerReferences, the DefaultTolerationSeconds tolerations, the affinity) and what they do
    not (name, uid)."""
    app = {"app": "web", "pod-template-hash": template_hash}
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    apart = {"topologyKey": LABEL_ESXI_HOST, "labelSelector": {"matchLabels": app}}
    required_apart = {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
    return msgspec.json.encode(
        {
            "metadata": {
                "name": name,
                "namespace": "shop",
                "uid": f"uid-{name}",
                "labels": app,
                "ownerReferences": [{"kind": "ReplicaSet", "name": f"web-{template_hash}"}],
            },
            "spec": {
                "nodeName": "node-1",
                "tolerations": [not_ready | {"tolerationSeconds": 300}],
                "affinity": {"podAntiAffinity": required_apart},
            },
            "status": {"phase": "Running"},
        }
    )


def test_decoded_replicas_hold_what_they_repeat_once_and_read_as_decoded() -> None:
    """An informer's cache holds every pod: `decode_pod` shares a workload's repeated fields."""
    first, second = (decode_pod(_replica_json(n, "5d9f")) for n in ("web-5d9f-a", "web-5d9f-b"))
    other = decode_pod(_replica_json("web-77c4-a", "77c4"))
    assert first.metadata.labels is second.metadata.labels
    assert first.metadata.owner_references is second.metadata.owner_references
    assert first.spec.tolerations is second.spec.tolerations
    assert first.spec.affinity is second.spec.affinity
    assert first.spec.node_name is second.spec.node_name
    assert first.status.phase is second.status.phase
    assert other.metadata.labels is not first.metadata.labels  # another template: its own
    assert other.spec.tolerations is first.spec.tolerations  # ...but the same tolerations
    for name, decoded in (("web-5d9f-b", second), ("web-77c4-a", other)):
        template = name.split("-")[1]
        assert decoded == msgspec.json.decode(_replica_json(name, template), type=Pod)
