"""The PodTopologySpread fixture cases (tests/fixtures/kube-scheduler-podtopologyspread) turned
into API objects and an engine, and the engine's answers in the shape the cases expect.

The fixtures write objects the way upstream's test builders do (see the fixture README); this
module is the one place that reads that shorthand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from hostaffinity.affinity import spread_filtering
from hostaffinity.affinity.engine import AffinityEngine, FilterMode
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import LabelSelector, Node, Pod, TopologySpreadConstraint
from hostaffinity.affinity.selectors import compile_label_selector
from hostaffinity.affinity.topology_spread import (
    SYSTEM_DEFAULT_CONSTRAINTS,
    NodeInclusion,
    SpreadConstraint,
    SpreadDefaults,
    default_selector,
)
from hostaffinity.schema.names import POD_PHYSICAL_ANTI_AFFINITY
from tests.recorded_fixtures import fixture_dir

FIXTURES = "kube-scheduler-podtopologyspread"
SPREAD_FIELDS = (
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
)
SUCCESS = "Success"
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"
Case = dict[str, Any]


def load(file: str) -> list[Case]:
    """The cases of one fixture file, each with an id `Test/name` unique within the file."""
    data = yaml.safe_load((fixture_dir(FIXTURES) / file).read_text())
    cases: list[Case] = data["cases"]
    seen: dict[str, int] = {}
    for case in cases:
        base = f"{case['test']}/{case['name']}"
        seen[base] = seen.get(base, 0) + 1
        case["id"] = base if seen[base] == 1 else f"{base} #{seen[base]}"
    return cases


def fixture_path(file: str) -> Path:
    return fixture_dir(FIXTURES) / file


def spread(fields: list[Any]) -> dict[str, Any]:
    """A TopologySpreadConstraint from upstream's positional builder arguments."""
    return {k: v for k, v in zip(SPREAD_FIELDS, fields, strict=False) if v is not None}


def incoming(spec: Mapping[str, Any]) -> Pod:
    """The pod to schedule (name `p`, namespace `default` unless given)."""
    metadata: dict[str, Any] = {
        "name": spec.get("name", "p"),
        "namespace": spec.get("namespace", "default"),
        "labels": dict(spec.get("labels") or {}),
    }
    if spec.get("opt_in"):
        metadata["annotations"] = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
    if "owner" in spec:
        kind, name = spec["owner"]
        metadata["ownerReferences"] = [{"kind": kind, "name": name, "controller": True}]
    body: dict[str, Any] = {
        "tolerations": list(spec.get("tolerations") or ()),
        "topologySpreadConstraints": [spread(s) for s in spec.get("spreads") or ()],
    }
    if "nodeSelector" in spec:
        body["nodeSelector"] = dict(spec["nodeSelector"])
    if "nodeAffinity" in spec:
        expressions = [
            {"key": key, "operator": op, "values": list(values)}
            for key, op, values in spec["nodeAffinity"]
        ]
        required = {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        body["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    return msgspec.convert({"metadata": metadata, "spec": body}, Pod)


def existing(entry: list[Any]) -> Pod:
    """`[name, node, labels, {namespace?, terminating?}]` as an assigned pod."""
    name, node, labels, *rest = entry
    extra = rest[0] if rest else {}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": extra.get("namespace", "default"),
        "labels": dict(labels),
    }
    if extra.get("terminating"):
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return msgspec.convert({"metadata": metadata, "spec": {"nodeName": node}}, Pod)


def node(entry: list[Any]) -> Node:
    """`[name, labels, taints?]` as a Node."""
    name, labels, *rest = entry
    body = {
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"taints": rest[0] if rest else []},
    }
    return msgspec.convert(body, Node)


def defaults(config: Mapping[str, Any]) -> SpreadDefaults:
    """The profile's PodTopologySpreadArgs, with DefaultSelector over the case's objects."""
    services = [dict(s) for s in config.get("services") or ()]
    replica_sets = {
        name: msgspec.convert(selector, LabelSelector)
        for name, selector in (config.get("replicasets") or {}).items()
    }

    def selector_of(pod: Pod) -> Any:
        owner = next((r for r in pod.metadata.owner_references if r.controller), None)
        controller = None
        if owner is not None and owner.kind == "ReplicaSet":
            controller = replica_sets.get(owner.name)
        return default_selector(pod, services, controller)

    if config.get("defaulting", "List") == "System":
        return SpreadDefaults(SYSTEM_DEFAULT_CONSTRAINTS, True, selector_of)
    listed = tuple(
        msgspec.convert(spread(c), TopologySpreadConstraint)
        for c in config.get("default_constraints") or ()
    )
    return SpreadDefaults(listed, False, selector_of)


def cluster(case: Case) -> tuple[AffinityEngine, Pod]:
    """The case's cluster (its pods, with `added` and without `removed`) and incoming pod."""
    index = ClusterIndex(physical_anti_affinity=case.get("physical_anti_affinity", "opt-in"))
    for entry in [*case.get("nodes", ()), *case.get("failed_nodes", ())]:
        index.upsert_node(node(entry))
    for name, host in (case.get("placement") or {}).items():
        index.set_placement(name, host)
    pods = [*case.get("pods", ()), *([case["added"]] if "added" in case else [])]
    for entry in pods:
        if entry[0] != case.get("removed"):
            index.upsert_pod(existing(entry))
    engine = AffinityEngine(index, spread_defaults=defaults(case.get("config") or {}))
    return engine, incoming(case.get("pod") or {})


def candidates(case: Case) -> list[str]:
    return [entry[0] for entry in case.get("nodes", ())]


def mode_of(case: Case) -> FilterMode:
    return FilterMode(case.get("mode", FilterMode.KUBE_SCHEDULER.value))


def described(constraint: SpreadConstraint) -> tuple[Any, ...]:
    """A compiled constraint in the fixtures' `[maxSkew, key, selector, minDomains, policies]`."""
    return (
        constraint.max_skew,
        constraint.topology_key,
        (constraint.selector.nothing, frozenset(constraint.selector.requirements)),
        constraint.min_domains,
        constraint.node_affinity_policy,
        constraint.node_taints_policy,
    )


def expected_constraints(rows: Iterable[list[Any]]) -> list[tuple[Any, ...]]:
    result = []
    for max_skew, key, selector, min_domains, affinity, taints in rows:
        compiled = compile_label_selector(
            None if selector is None else msgspec.convert(selector, LabelSelector)
        )
        requirements = (compiled.nothing, frozenset(compiled.requirements))
        result.append((max_skew, key, requirements, min_domains, affinity, taints))
    return result


def plugin_verdicts(engine: AffinityEngine, pod: Pod, mode: FilterMode) -> dict[str, str]:
    """PodTopologySpread's Filter alone, per node: Success or the status code."""
    stages = spread_filtering.filter_stages(
        engine.index, pod, engine.hard_spreads(pod, mode), NodeInclusion(engine.index, pod)
    )
    verdicts = dict.fromkeys(engine.index.node_names, SUCCESS)
    for failing, why in stages:
        for name in failing:
            if verdicts[name] == SUCCESS:
                verdicts[name] = UNRESOLVABLE if why.unresolvable else UNSCHEDULABLE
    return verdicts
