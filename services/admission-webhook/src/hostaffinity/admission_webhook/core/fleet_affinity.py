"""Fleet groups at admission: a pod created with `hostaffinity.io/fleet-group: <name>` gets two
*preferred* terms, never a required one, so the webhook never keeps a pod from being scheduled
(docs/fleet-groups.md):

- node affinity away from the ESXi hosts holding other clusters' members of the group, where the
  fleet view places them when the pod is admitted (`NotIn` on `hostaffinity.io/esxi-host`): a
  snapshot, which the descheduler's repair makes up for when the others move later;
- pod anti-affinity on the host key against this cluster's members of the group in every
  namespace (`namespaceSelector: {}`), which kube-scheduler keeps current itself.

Both weigh `WEIGHT`. They are added after the main mutation's operations (mutation.py), written
against the pod as those leave it, and never twice: a pod that already has a preferred `NotIn`
on the host key, or a preferred host-key anti-affinity term selecting its group, keeps it as it is
(a reinvocation, or the pod's author's own). A field of a shape the API server refuses is never
replaced.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, cast

from hostaffinity.admission_webhook.core.mutation import PREFERRED, Mutation, Operation
from hostaffinity.affinity.fleet_groups import FleetMembers
from hostaffinity.schema import LABEL_ESXI_HOST, LABEL_FLEET_GROUP

# kube-scheduler's largest preferred weight: the fleet's preference counts as much as any.
WEIGHT: Final = 100
AFFINITY: Final = "/spec/affinity"


def with_fleet_terms(
    mutation: Mutation, pod: Mapping[str, Any] | None, fleet: FleetMembers
) -> Mutation:
    """The mutation, with the fleet group's preferred terms when the pod is in a group (a pod
    the main planner could not read is left to it)."""
    if pod is None or mutation.warnings:
        return mutation
    operations = fleet_operations(pod, mutation.operations, fleet)
    if not operations:
        return mutation
    return replace(mutation, operations=[*mutation.operations, *operations])


def fleet_operations(
    pod: Mapping[str, Any], planned: Sequence[Operation], fleet: FleetMembers
) -> list[Operation]:
    """The JSONPatch operations that give a fleet group member its preferred terms."""
    patched = _patched(pod, planned)
    if patched is None:
        return []
    labels = _object(_object(patched.get("metadata")).get("labels"))
    group = labels.get(LABEL_FLEET_GROUP)
    if not isinstance(group, str) or not group:
        return []
    affinity = _object(_object(patched.get("spec")).get("affinity"))
    wanted: dict[str, dict[str, Any]] = {}
    hosts = sorted({member.host for member in fleet.of(group)})
    node_terms = _list(_object(affinity.get("nodeAffinity")).get(PREFERRED))
    if hosts and not any(_avoids_hosts(t) for t in node_terms):
        expression = {"key": LABEL_ESXI_HOST, "operator": "NotIn", "values": hosts}
        wanted["nodeAffinity"] = {
            "weight": WEIGHT,
            "preference": {"matchExpressions": [expression]},
        }
    anti_terms = _list(_object(affinity.get("podAntiAffinity")).get(PREFERRED))
    if not any(_apart_from_group(t, group) for t in anti_terms):
        selected = {
            "labelSelector": {"matchLabels": {LABEL_FLEET_GROUP: group}},
            "namespaceSelector": {},
            "topologyKey": LABEL_ESXI_HOST,
        }
        wanted["podAntiAffinity"] = {"weight": WEIGHT, "podAffinityTerm": selected}
    if not wanted:
        return []
    spec = _object(patched.get("spec"))
    if "affinity" not in spec:
        whole = {kind: {PREFERRED: [term]} for kind, term in wanted.items()}
        return [{"op": "add", "path": AFFINITY, "value": whole}]
    if not isinstance(spec["affinity"], dict):
        return []  # a shape the API server refuses: not ours to replace
    operations: list[Operation] = []
    for kind, term in wanted.items():
        container = affinity.get(kind)
        path, value = f"{AFFINITY}/{kind}", cast(Any, term)
        if container is None:
            value = {PREFERRED: [term]}
        elif not isinstance(container, dict):
            continue
        elif PREFERRED not in container:
            path, value = f"{path}/{PREFERRED}", [term]
        elif isinstance(container[PREFERRED], list):
            path = f"{path}/{PREFERRED}/-"
        else:
            continue
        operations.append({"op": "add", "path": path, "value": value})
    return operations


def _avoids_hosts(term: object) -> bool:
    """A preferred node term with a `NotIn` on the host key (ours, from an earlier pass)."""
    expressions = _list(_object(_object(term).get("preference")).get("matchExpressions"))
    return any(
        _object(e).get("key") == LABEL_ESXI_HOST and _object(e).get("operator") == "NotIn"
        for e in expressions
    )


def _apart_from_group(term: object, group: str) -> bool:
    affinity_term = _object(_object(term).get("podAffinityTerm"))
    selector = _object(_object(affinity_term.get("labelSelector")).get("matchLabels"))
    return (
        affinity_term.get("topologyKey") == LABEL_ESXI_HOST
        and selector.get(LABEL_FLEET_GROUP) == group
    )


def _object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _patched(pod: Mapping[str, Any], operations: Sequence[Operation]) -> dict[str, Any] | None:
    """The pod as the main planner's operations leave it (they add and replace only); None
    when one of them does not apply, which the planner never writes."""
    document: dict[str, Any] = copy.deepcopy(dict(pod))
    for operation in operations:
        *parents, last = operation["path"].split("/")[1:]
        target: Any = document
        try:
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            value = copy.deepcopy(operation["value"])
            if isinstance(target, list):
                if last == "-":
                    target.append(value)
                elif operation["op"] == "replace":
                    target[int(last)] = value
                else:
                    target.insert(int(last), value)
            else:
                target[last] = value
        except (KeyError, IndexError, ValueError, TypeError):
            return None
    return document
