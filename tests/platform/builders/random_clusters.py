"""Small random clusters and random changes to them, for the scoped-cycle properties.

A cluster has nodes on ESXi hosts (placements from the topology KV, else an esxi-host label some
nodes carry) in two zones, some nodes labelled disk=ssd or tainted, two namespaces, and pods of
a few ReplicaSets per app with required and preferred pod (anti-)affinity over the node, host and
zone keys (some with a namespaceSelector, the NotIn kind included), node selectors, tolerations
and topology spreads (some honouring taints). Each change is applied to the state the way the
feeds apply it, and returns the Scope the feeds hand the trigger for it (the triggers' change
tests, then triggers.node_scope / pod_scope; a deletion is noted without a reason), so a
property compares what a scoped cycle sees with a full one.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec

from hostaffinity.descheduler.core.model import DeschedulerNode, DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.scope import Scope
from hostaffinity.descheduler.core.triggers import node_scope, node_trigger, pod_scope, pod_trigger
from tests.platform.builders.descheduler import ESXI, HOSTNAME, cluster, node, pod

ZONE = "topology.kubernetes.io/zone"
KEYS = (HOSTNAME, ESXI, ZONE)
APPS = ("a", "b", "c")
TIERS = ("x", "y")
NAMESPACES = {"default": {"env": "dev"}, "other": {"env": "prod"}}
TAINT = {"key": "maintenance", "value": "planned", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "flaky", "value": "yes", "effect": "PreferNoSchedule"}
TOLERATE = {"key": "maintenance", "operator": "Exists"}


class RandomCluster:
    """A state, its hosts and the next pod number; `change()` applies one random change."""

    def __init__(self, rng: random.Random, nodes: int = 12, hosts: int = 4, pods: int = 40):
        self.rng = rng
        self.hosts = [f"esx-{h}" for h in range(hosts)]
        self.node_names = [f"n{i}" for i in range(nodes)]
        self.deleted: list[DeschedulerNode] = []  # nodes removed, their pods left on them
        self.serial = 0
        self.state: ClusterState = cluster(
            [self._node(name) for name in self.node_names],
            [self._pod() for _ in range(pods)],
            placements={name: rng.choice(self.hosts) for name in self.node_names},
            namespaces=NAMESPACES,
        )

    def _node(self, name: str) -> Any:
        rng = self.rng
        labels = {ZONE: rng.choice(("z1", "z2"))}
        if rng.random() < 0.5:
            labels["disk"] = "ssd"
        if rng.random() < 0.3:  # read when the node has no placement
            labels[ESXI] = rng.choice(self.hosts)
        taints = [t for t in (TAINT, SOFT_TAINT) if rng.random() < 0.15]
        return node(name, labels, taints=taints)

    def _labels(self) -> dict[str, str]:
        return {"app": self.rng.choice(APPS), "tier": self.rng.choice(TIERS)}

    def _term(self) -> dict[str, Any]:
        rng = self.rng
        term: dict[str, Any] = {
            "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
            "topologyKey": rng.choice(KEYS),
        }
        roll = rng.random()
        if roll < 0.15:
            term["namespaceSelector"] = {"matchLabels": {"env": "prod"}}
        elif roll < 0.3:  # matches no labels at all: every namespace (interpod.incoming_scope)
            term["namespaceSelector"] = {
                "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]
            }
        return term

    def _affinity(self) -> dict[str, Any] | None:
        rng = self.rng
        affinity: dict[str, Any] = {}
        for kind in ("podAntiAffinity", "podAffinity"):
            roll = rng.random()
            if roll < 0.2:
                affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [self._term()]}
            elif roll < 0.3:
                weighted = {"weight": 10, "podAffinityTerm": self._term()}
                affinity[kind] = {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}
        if rng.random() < 0.15:
            weighted_node = {
                "weight": 5,
                "preference": {
                    "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                },
            }
            affinity["nodeAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": [weighted_node]
            }
        return affinity or None

    def _spread(self) -> list[dict[str, Any]]:
        rng = self.rng
        if rng.random() > 0.4:
            return []
        constraint: dict[str, Any] = {
            "maxSkew": rng.choice((1, 1, 2)),
            "topologyKey": rng.choice(KEYS),
            "whenUnsatisfiable": rng.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway")),
            "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
        }
        if rng.random() < 0.3:
            constraint["nodeTaintsPolicy"] = "Honor"
        return [constraint]

    def _pod(self, on: str | None = None) -> Any:
        rng = self.rng
        self.serial += 1
        return pod(
            f"p{self.serial}",
            on or rng.choice(self.node_names),
            self._labels(),
            namespace=rng.choice(sorted(NAMESPACES)),
            owner=("ReplicaSet", f"rs-{rng.choice(APPS)}-{rng.randrange(2)}"),
            affinity=self._affinity(),
            node_selector={"disk": "ssd"} if rng.random() < 0.15 else None,
            tolerations=[TOLERATE] if rng.random() < 0.5 else [],
            created_minutes_ago=rng.randint(1, 500),
            topology_spread=self._spread(),
        )

    def change(self) -> tuple[str, Scope]:
        """Apply one random change; returns what it was and the scope the feeds gather."""
        rng, state = self.rng, self.state
        kinds = (
            *("vmotion", "vmotion", "assign", "relabel", "node-labels", "delete", "cordon"),
            *("move", "adopt", "unplace", "node-delete", "node-add"),
        )
        kind = rng.choice(kinds)
        if kind == "node-add" and not self.deleted:
            kind = "node-delete"
        if kind == "node-delete" and len(self.deleted) >= 3:
            kind = "node-add"
        present = sorted(state.nodes)
        if kind == "cordon":  # starts no cycle: only the state's journal of node changes has it
            name = rng.choice(present)
            old = state.nodes[name]
            flipped = msgspec.structs.replace(old.spec, unschedulable=not old.spec.unschedulable)
            new = msgspec.structs.replace(old, spec=flipped)
            state.upsert_node(new)
            return f"node {name} cordoned or uncordoned", _node_changed(name, old, new)
        if kind == "vmotion":
            name = rng.choice(self.node_names)
            state.set_placement(name, rng.choice(self.hosts))
            return f"vMotion of {name}", node_scope(name)
        if kind == "unplace":  # its VM no longer matched: its esxi-host label decides
            name = rng.choice(self.node_names)
            state.set_placement(name, None)
            return f"placement of {name} removed", node_scope(name)
        if kind == "node-labels":
            name = rng.choice(present)
            old = state.nodes[name]
            new = self._node(name)
            state.upsert_node(new)
            return f"node {name} relabelled or re-tainted", _node_changed(name, old, new)
        if kind == "node-delete":
            name = rng.choice(present)
            self.deleted.append(state.nodes[name])
            state.remove_node(name)  # a deletion starts no cycle; the next one judges it
            return f"node {name} deleted", node_scope(name)
        if kind == "node-add":
            back = self.deleted.pop(rng.randrange(len(self.deleted)))
            state.upsert_node(back)
            return f"node {back.metadata.name} added back", _node_changed(
                back.metadata.name, None, back
            )
        if kind == "assign":
            new = self._pod()
            state.upsert_pod(new)
            return f"{new.key} assigned", _pod_changed(None, new)
        key = rng.choice(sorted(state.pods))
        old = state.pods[key]
        if kind == "move":  # onto a node of a replica of its workload, where one is
            siblings = state.workloads[state.workload_key(key) or key] - {key}
            target = state.pods[min(siblings)].spec.node_name if siblings else rng.choice(present)
            moved = msgspec.structs.replace(
                old, spec=msgspec.structs.replace(old.spec, node_name=target)
            )
            state.upsert_pod(moved)
            return f"{key} moved to {target}", _pod_changed(old, moved)
        if kind == "adopt":  # its owner changed, nothing else: starts no cycle
            refs = [
                msgspec.structs.replace(ref, name=f"rs-{rng.choice(APPS)}-{rng.randrange(2)}")
                for ref in old.metadata.owner_references
            ]
            meta = msgspec.structs.replace(old.metadata, owner_references=refs)
            adopted = msgspec.structs.replace(old, metadata=meta)
            state.upsert_pod(adopted)
            return f"{key} adopted", _pod_changed(old, adopted)
        if kind == "relabel":
            relabelled = pod(
                old.metadata.name,
                old.spec.node_name,
                self._labels(),
                namespace=old.metadata.namespace,
                affinity=None,
            )
            state.upsert_pod(relabelled)
            return f"{key} relabelled", _pod_changed(old, relabelled)
        state.remove_pod(key)
        return f"{key} deleted", pod_scope(key, old)


def _node_changed(name: str, old: DeschedulerNode | None, new: DeschedulerNode) -> Scope:
    """What the feeds hand the trigger: the node when the change starts a cycle, else nothing."""
    return node_scope(name, old) if node_trigger(old, new) is not None else Scope()


def _pod_changed(old: DeschedulerPod | None, new: DeschedulerPod) -> Scope:
    return pod_scope(new.key, old) if pod_trigger(old, new) is not None else Scope()
