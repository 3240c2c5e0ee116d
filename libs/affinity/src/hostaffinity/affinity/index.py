"""The incremental cluster index every decision reads.

Each pod, node, namespace or placement event touches only the index entries of that one object,
so an informer can feed it event by event; a decision then looks pods up by label instead of
scanning them. Kept:

- pods by node, by namespace, by (label key, value) and by label key, each split per namespace;
- existing pods' inter-pod terms by what they select ("anchor": a label pair or key the matched
  pod must carry), so "which existing anti-affinity forbids this pod" reads a few buckets;
- nodes by raw label (for node affinity), by resolved ESXi host (placement map first, then the
  node label), by taint set, and the cordoned ones.

Two indexes fed the same objects in any order compare equal (`==`), which the property tests
rely on. Only assigned, non-terminal pods are kept: those are the pods kube-scheduler counts.

Records and compiled terms are immutable and acyclic, so they are declared `gc=False`: the cyclic
garbage collector never tracks them, which keeps young collections rare during pod events. Once the
initial lists are in, `freeze_gc_after_initial_load()` takes the rest of the long-lived objects out
of full collections too.

A decision that plans moves (the descheduler's cycle) opens `planned_moves()`: each pod it moves
shows on its new node until the moves are closed, which puts every record back exactly (each
node's pods in the order they were iterated before, so the next decision reads them alike); pod
events are refused meanwhile, so nothing the undo does not know about lands underneath it.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Set
from itertools import filterfalse, repeat
from typing import Final, Literal, TypeVar

import msgspec

from hostaffinity.affinity.interpod import (
    HOST_KEYS,
    AffinityTerm,
    NamespaceScope,
    PhysicalAntiAffinity,
    PodTerms,
    compile_pod_terms,
)
from hostaffinity.affinity.model import Namespace, Node, Pod, Taint
from hostaffinity.affinity.selectors import IN, Selector
from hostaffinity.affinity.topology_spread import SpreadConstraint, compile_spread_constraints
from hostaffinity.affinity.workloads import WorkloadRef, workload_of

TermKind = Literal["required_affinity", "required_anti", "preferred_affinity", "preferred_anti"]
TERM_KINDS: Final[tuple[TermKind, ...]] = (
    "required_affinity",
    "required_anti",
    "preferred_affinity",
    "preferred_anti",
)
# Pods in these phases have stopped: kube-scheduler's informer drops them
# (pkg/scheduler/scheduler.go, field selector status.phase!=Succeeded,status.phase!=Failed).
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})

# An anchor is (key, value) for an In requirement, (key, None) for Exists, None for a selector
# with no positive requirement (checked against every pod).
Anchor = tuple[str, str | None] | None
_EMPTY: Final[frozenset[str]] = frozenset()

K = TypeVar("K")
J = TypeVar("J")
V = TypeVar("V")


class PodRecord(msgspec.Struct, frozen=True, gc=False):
    """What the index keeps of an assigned pod."""

    key: str
    namespace: str
    node: str
    labels: dict[str, str]
    terms: PodTerms
    workload: WorkloadRef | None = None  # what it is a replica of (exposure reads it)
    terminating: bool = False  # deletionTimestamp set: topology spread no longer counts it
    spreads: tuple[SpreadConstraint, ...] = ()  # its own topology spreads (exposure reads them)


class NodeRecord(msgspec.Struct, frozen=True, gc=False):
    """What the index keeps of a node."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool


def _anchors(selector: Selector) -> list[Anchor]:
    anchor = selector.anchor()
    if anchor is None:
        return [None]
    if anchor.op == IN:
        return [(anchor.key, value) for value in anchor.values]
    return [(anchor.key, None)]


def _add(mapping: dict[K, set[V]], key: K, item: V) -> None:
    bucket = mapping.get(key)
    if bucket is None:
        mapping[key] = {item}
    else:
        bucket.add(item)


def _discard(mapping: dict[K, set[V]], key: K, item: V) -> None:
    bucket = mapping.get(key)
    if bucket is not None:
        bucket.discard(item)
        if not bucket:
            del mapping[key]


def _add2(mapping: dict[K, dict[J, set[V]]], key: K, inner: J, item: V) -> None:
    _add(mapping.setdefault(key, {}), inner, item)


def _discard2(mapping: dict[K, dict[J, set[V]]], key: K, inner: J, item: V) -> None:
    nested = mapping.get(key)
    if nested is not None:
        _discard(nested, inner, item)
        if not nested:
            del mapping[key]


def counts_on_its_node(pod: Pod) -> bool:
    """Whether kube-scheduler counts the pod on a node: assigned and not finished."""
    return bool(pod.spec.node_name) and pod.status.phase not in _TERMINAL_PHASES


def freeze_gc_after_initial_load() -> None:
    """Collect garbage, then move every live object to the GC's permanent generation.

    Call it once the informers' initial lists are indexed (and the caller's own startup state is
    built). A 150,000-pod cluster leaves ~1M container objects (the informers' Pods, the index's
    sets) that a full collection would otherwise traverse: a ~0.5 s pause each time one runs.
    Frozen objects are still freed by reference counting when the index drops them; only garbage
    cycles among them would stay, and the index makes none. Process-wide, see `gc.freeze`.
    """
    gc.collect()
    gc.freeze()


class ClusterIndex:
    """Pods, nodes, namespaces and placements, indexed for affinity decisions."""

    def __init__(self, *, physical_anti_affinity: PhysicalAntiAffinity = "opt-in") -> None:
        self.physical_anti_affinity = physical_anti_affinity
        self._pods: dict[str, PodRecord] = {}
        self._nodes: dict[str, NodeRecord] = {}
        self._namespaces: dict[str, dict[str, str]] = {}
        self._placement: dict[str, str] = {}
        self._pods_by_node: dict[str, set[str]] = {}
        self._pods_by_ns: dict[str, set[str]] = {}
        self._pods_by_label: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._pods_by_key: dict[str, dict[str, set[str]]] = {}
        self._terms: dict[TermKind, dict[Anchor, set[tuple[str, int]]]] = {
            kind: {} for kind in TERM_KINDS
        }
        self._nodes_by_label: dict[str, dict[str, set[str]]] = {}
        self._nodes_by_host: dict[str, dict[str, set[str]]] = {}
        self._host_of: dict[str, dict[str, str]] = {key: {} for key in HOST_KEYS}
        self._nodes_with: dict[str, set[str]] = {}
        self._nodes_by_taints: dict[tuple[Taint, ...], set[str]] = {}
        self._cordoned: set[str] = set()
        self._all_nodes: set[str] = set()
        self._planning: PlannedMoves | None = None

    # -- equality (for the property tests) ---------------------------------------------------

    def _state(self) -> tuple[object, ...]:
        return (
            self.physical_anti_affinity,
            self._pods,
            self._nodes,
            self._namespaces,
            self._placement,
            self._pods_by_node,
            self._pods_by_ns,
            self._pods_by_label,
            self._pods_by_key,
            self._terms,
            self._nodes_by_label,
            self._nodes_by_host,
            self._host_of,
            self._nodes_with,
            self._nodes_by_taints,
            self._cordoned,
            self._all_nodes,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterIndex):
            return NotImplemented
        return self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]

    # -- pod events ----------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        """Add or update a pod; an unassigned or finished pod is dropped from the index."""
        self._refuse_while_planning()
        key = pod.key
        self.remove_pod(key)
        if not counts_on_its_node(pod):
            return
        record = PodRecord(
            key=key,
            namespace=pod.metadata.namespace,
            node=pod.spec.node_name,
            labels=pod.metadata.labels,
            terms=compile_pod_terms(pod, self.physical_anti_affinity),
            workload=workload_of(pod),
            terminating=pod.metadata.deletion_timestamp is not None,
            spreads=compile_spread_constraints(pod, self.physical_anti_affinity),
        )
        self._pods[key] = record
        ns = record.namespace
        _add(self._pods_by_node, record.node, key)
        _add(self._pods_by_ns, ns, key)
        for label in record.labels.items():
            _add2(self._pods_by_label, label, ns, key)
            _add2(self._pods_by_key, label[0], ns, key)
        for kind, position, term in self._each_term(record):
            for anchor in _anchors(term.selector):
                _add(self._terms[kind], anchor, (key, position))

    def remove_pod(self, key: str) -> None:
        """Forget a pod by its `namespace/name` key (a no-op for an unknown pod)."""
        self._refuse_while_planning()
        record = self._pods.pop(key, None)
        if record is None:
            return
        ns = record.namespace
        _discard(self._pods_by_node, record.node, key)
        _discard(self._pods_by_ns, ns, key)
        for label in record.labels.items():
            _discard2(self._pods_by_label, label, ns, key)
            _discard2(self._pods_by_key, label[0], ns, key)
        for kind, position, term in self._each_term(record):
            for anchor in _anchors(term.selector):
                _discard(self._terms[kind], anchor, (key, position))

    def _refuse_while_planning(self) -> None:
        if self._planning is not None:
            raise RuntimeError("pod event while planned moves are open: close them first")

    # -- planned moves -------------------------------------------------------------------------

    def planned_moves(self) -> PlannedMoves:
        """Open the planned moves of one decision (one at a time); close them to undo."""
        if self._planning is not None:
            raise RuntimeError("planned moves are already open on this index")
        self._planning = PlannedMoves(self)
        return self._planning

    def _relocate(self, record: PodRecord, sets: dict[str, set[str] | None]) -> None:
        """Swap in a record of the same pod on another node: a move changes the node only, so
        its label and term buckets stay as they are.

        A node's own set of pods is never touched: the first move from or onto a node keeps it
        in `sets` (None: the node had none) and works on a copy, which stays even when emptied;
        `_restore` puts the very sets back. A pod taken out of a set and added again can take
        another slot, and a full pass follows `pods_on` order: the next pass must see the same.
        """
        key = record.key
        by_node = self._pods_by_node
        source = self._pods[key].node
        for node in (source, record.node):
            if node not in sets:
                own = sets[node] = by_node.get(node)
                by_node[node] = set() if own is None else own.copy()
        by_node[source].discard(key)
        by_node[record.node].add(key)
        self._pods[key] = record

    def _restore(self, records: Iterable[PodRecord], sets: Mapping[str, set[str] | None]) -> None:
        """Put back the records and the per-node sets `_relocate` kept aside: replacing the
        value of a key keeps its place, and only the keys the moves added are removed, so the
        node order is as it was."""
        self._pods.update((record.key, record) for record in records)
        by_node = self._pods_by_node
        for node, own in sets.items():
            if own is None:
                del by_node[node]
            else:
                by_node[node] = own

    def _end_planning(self, moves: PlannedMoves) -> None:
        if self._planning is moves:
            self._planning = None

    @staticmethod
    def _each_term(record: PodRecord) -> Iterator[tuple[TermKind, int, AffinityTerm]]:
        if not record.terms:  # most pods: skip the four kinds
            return
        for kind in TERM_KINDS:
            for position, term in enumerate(getattr(record.terms, kind)):
                yield kind, position, term

    # -- node, namespace and placement events --------------------------------------------------

    def upsert_node(self, node: Node) -> None:
        """Add or update a node."""
        name = node.metadata.name
        self.remove_node(name)
        record = NodeRecord(
            name=name,
            labels=node.metadata.labels,
            taints=tuple(node.spec.taints),
            unschedulable=node.spec.unschedulable,
        )
        self._nodes[name] = record
        self._all_nodes.add(name)
        for key, value in record.labels.items():
            _add2(self._nodes_by_label, key, value, name)
            if key not in HOST_KEYS:
                _add(self._nodes_with, key, name)
        if record.taints:
            _add(self._nodes_by_taints, record.taints, name)
        if record.unschedulable:
            self._cordoned.add(name)
        self._index_host(name)

    def remove_node(self, name: str) -> None:
        """Forget a node (its placement is kept: the topology KV owns that)."""
        record = self._nodes.get(name)
        if record is None:
            return
        self._unindex_host(name)
        del self._nodes[name]
        self._all_nodes.discard(name)
        for key, value in record.labels.items():
            _discard2(self._nodes_by_label, key, value, name)
            if key not in HOST_KEYS:
                _discard(self._nodes_with, key, name)
        if record.taints:
            _discard(self._nodes_by_taints, record.taints, name)
        self._cordoned.discard(name)

    def set_placement(self, node: str, host: str | None) -> None:
        """Record the ESXi host a node's VM runs on now (None: unknown).

        `host` is the host's label value (NodePlacement.host_label), the same space as the
        `hostaffinity.io/esxi-host` node label, so domains from either source compare equal.
        """
        self._unindex_host(node)
        if host is None:
            self._placement.pop(node, None)
        else:
            self._placement[node] = host
        self._index_host(node)

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Record a namespace's labels (namespaceSelector reads them)."""
        self._namespaces[name] = dict(labels)

    def upsert_namespace(self, namespace: Namespace) -> None:
        """Record a Namespace object's labels."""
        self.set_namespace(namespace.metadata.name, namespace.metadata.labels)

    def remove_namespace(self, name: str) -> None:
        """Forget a namespace."""
        self._namespaces.pop(name, None)

    def _index_host(self, node: str) -> None:
        for key in HOST_KEYS:
            value = self.domain(node, key)
            if value is not None:
                _add2(self._nodes_by_host, key, value, node)
                _add(self._nodes_with, key, node)
                self._host_of[key][node] = value

    def _unindex_host(self, node: str) -> None:
        for key in HOST_KEYS:
            value = self.domain(node, key)
            if value is not None:
                _discard2(self._nodes_by_host, key, value, node)
                _discard(self._nodes_with, key, node)
                del self._host_of[key][node]

    # -- node queries --------------------------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        """All nodes, in the order they were first added."""
        return list(self._nodes)

    def has_node(self, name: str) -> bool:
        return name in self._nodes

    def node(self, name: str) -> NodeRecord | None:
        return self._nodes.get(name)

    def all_nodes(self) -> Set[str]:
        """The set of node names (do not mutate)."""
        return self._all_nodes

    def label_values(self, key: str) -> Mapping[str, Set[str]]:
        """Raw node labels: value -> nodes with `key=value` (for node affinity)."""
        return self._nodes_by_label.get(key, {})

    def domain(self, node: str, key: str) -> str | None:
        """The node's topology domain for `key`; ESXi-host keys read the placement map first."""
        record = self._nodes.get(node)
        if record is None:
            return None
        if key in HOST_KEYS:
            placed = self._placement.get(node)
            if placed is not None:
                return placed
        return record.labels.get(key)

    def domains(self, key: str) -> Mapping[str, Set[str]]:
        """Topology domain value -> nodes in it, for any key."""
        if key in HOST_KEYS:
            return self._nodes_by_host.get(key, {})
        return self._nodes_by_label.get(key, {})

    def hosts_of_nodes(self, key: str) -> Mapping[str, str]:
        """Node -> its domain for an ESXi-host `key` (as `domain` resolves it), for callers
        that look up many nodes at once: `map(hosts.get, nodes)` runs without a Python call
        per node."""
        return self._host_of[key]

    def nodes_with(self, key: str) -> Set[str]:
        """Nodes that have a topology domain for `key` (do not mutate)."""
        return self._nodes_with.get(key, _EMPTY)

    def nodes_without(self, key: str) -> Set[str]:
        """Nodes with no topology domain for `key`; free when every node has one."""
        with_key = self.nodes_with(key)
        if len(with_key) == len(self._all_nodes):
            return _EMPTY
        return self._all_nodes - with_key

    def feasible_in_order(self, rejected: Set[str]) -> list[str]:
        """Every node not in `rejected` (indexed nodes), in `node_names` order, without a
        per-node Python loop (a filter over all nodes returns most of them, or none)."""
        if len(rejected) >= len(self._nodes):
            return []
        if len(rejected) * 4 > len(self._nodes):
            return list(filterfalse(rejected.__contains__, self._nodes))
        remaining = self._nodes.copy()
        deque(map(remaining.pop, rejected, repeat(None)), maxlen=0)  # a C loop, no Python one
        return list(remaining)

    def taint_groups(self) -> Mapping[tuple[Taint, ...], Set[str]]:
        """Nodes by their (non-empty) taint list: the filter decides once per distinct list."""
        return self._nodes_by_taints

    def cordoned(self) -> Set[str]:
        """Nodes marked `spec.unschedulable`."""
        return self._cordoned

    # -- namespace and pod queries -------------------------------------------------------------

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        """Known namespaces and their labels."""
        return self._namespaces

    def pod(self, key: str) -> PodRecord | None:
        return self._pods.get(key)

    def pods(self) -> Iterator[PodRecord]:
        """Every indexed pod."""
        return iter(self._pods.values())

    def pods_on(self, node: str) -> Iterator[PodRecord]:
        """Pods assigned to a node."""
        return (self._pods[key] for key in self._pods_by_node.get(node, _EMPTY))

    def __len__(self) -> int:
        return len(self._pods)

    def matching_pods(self, scope: NamespaceScope, selector: Selector) -> Iterator[PodRecord]:
        """Pods in the scope whose labels the selector matches; cost ~ the anchor's pods."""
        if selector.nothing:
            return
        anchor = selector.anchor()
        if anchor is None:
            sources: list[Mapping[str, set[str]]] = [self._pods_by_ns]
        elif anchor.op == IN:
            sources = [self._pods_by_label.get((anchor.key, v), {}) for v in anchor.values]
        else:
            sources = [self._pods_by_key.get(anchor.key, {})]
        pods = self._pods
        for by_ns in sources:
            for keys in self._in_scope(by_ns, scope):
                for key in keys:
                    record = pods[key]
                    if selector.matches(record.labels):
                        yield record

    @staticmethod
    def _in_scope(by_ns: Mapping[str, set[str]], scope: NamespaceScope) -> Iterator[set[str]]:
        if scope.everywhere:
            yield from by_ns.values()
        elif len(scope.names) < len(by_ns):
            for ns in scope.names:
                keys = by_ns.get(ns)
                if keys:
                    yield keys
        else:
            for ns, keys in by_ns.items():
                if ns in scope.names:
                    yield keys

    def terms_matching(
        self, kind: TermKind, namespace: str, labels: Mapping[str, str]
    ) -> Iterator[tuple[PodRecord, AffinityTerm]]:
        """Existing pods' terms of one kind that select a pod with this namespace and labels.

        The namespaceSelector of an existing pod's term reads the pod's real namespace labels
        (an unknown namespace has none), as kube-scheduler's GetNamespaceLabelsSnapshot does.
        """
        buckets = self._terms[kind]
        if not buckets:
            return
        refs: set[tuple[str, int]] = set(buckets.get(None, ()))
        for key, value in labels.items():
            refs.update(buckets.get((key, value), ()))
            refs.update(buckets.get((key, None), ()))
        ns_labels = self._namespaces.get(namespace, {})
        for pod_key, position in refs:
            record = self._pods[pod_key]
            term = getattr(record.terms, kind)[position]
            if term.matches(namespace, labels, ns_labels):
                yield record, term


class PlannedMoves:
    """Pods shown on other nodes while one decision is made, put back when it closes.

    Only the index's own records move (the same record with another node), and the nodes' sets
    of pods they leave or join are copies, so the undo restores the very objects that were
    there, in their iteration order; after `close` it refuses further moves.
    """

    def __init__(self, index: ClusterIndex) -> None:
        self._index: ClusterIndex | None = index
        self._originals: dict[str, PodRecord] = {}
        self._sets: dict[str, set[str] | None] = {}  # each touched node's own set (None: none)

    def move(self, key: str, node: str) -> None:
        """Show the indexed pod `key` on `node` until close."""
        index = self._index
        if index is None:
            raise RuntimeError("planned moves are closed")
        record = index._pods[key]
        self._originals.setdefault(key, record)
        index._relocate(msgspec.structs.replace(record, node=node), self._sets)

    def close(self) -> None:
        """Put every moved pod back on its node (idempotent)."""
        index, self._index = self._index, None
        if index is None:
            return
        index._restore(self._originals.values(), self._sets)
        self._originals.clear()
        self._sets.clear()
        index._end_planning(self)
