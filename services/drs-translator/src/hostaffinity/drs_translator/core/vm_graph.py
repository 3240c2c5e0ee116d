"""Each cluster's constraints between node VMs, read from the pods that carry terms.

A VM graph has edges "apart" (host anti-affinity, and host spreads that mean one replica per
host) and "together" (required host affinity met on exactly one other VM), each with the pods
behind it, and seeds: the VMs of replicas whose term selects themselves. `vm_vm_rules.py` makes
the rules of it. What cannot be expressed as a VM edge is reported as untranslatable here.

- Anti-affinity is driven from the terms (`Apart`): each distinct term is asked once which pods
  it selects, so the cost follows the terms, not the cluster.
- Required affinity gives an edge only when the pod's term is met by pods on exactly one other
  VM ("be with that VM" is then exactly what was asked); otherwise it is not translatable.
- A topology spread over ESXi hosts gives the same clique as required host anti-affinity, only
  where it means exactly "each replica on its own host": `maxSkew: 1`, `DoNotSchedule`, no node
  inclusion narrowing the hosts (no required node affinity honoured, taints ignored), and no
  more replicas than the hosts their nodes are on (connected, not in maintenance). With N
  replicas over H >= N hosts, a skew of at most 1 leaves no host with two. Anything else asks
  for balance, which DRS has no rule for: nothing is sent, and kube-scheduler and the
  descheduler keep the spread.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from hostaffinity.affinity.index import ClusterIndex, PodRecord, TermKind
from hostaffinity.affinity.interpod import AffinityTerm, NamespaceScope, incoming_scope
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.nodeaffinity import required_node_affinity
from hostaffinity.affinity.topology_spread import SpreadConstraint, compile_spread_constraints
from hostaffinity.drs_translator.core.cliques import edge
from hostaffinity.drs_translator.core.naming import anti_affinity_key, spread_key
from hostaffinity.drs_translator.core.plan import (
    CONNECTED,
    NodeVms,
    Plan,
    PlannerSettings,
    Untranslatable,
    Vm,
    is_away,
)
from hostaffinity.schema import EsxiHost, NodePlacement

_EVERYWHERE: Final = NamespaceScope(everywhere=True)


@dataclass(slots=True)
class Graph:
    """One cluster's constraints between VMs, with the pods behind each."""

    apart: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    seeds: dict[str, set[str]] = field(default_factory=dict)
    seed_pods: dict[str, set[str]] = field(default_factory=dict)
    together: dict[tuple[str, str], set[str]] = field(default_factory=dict)


def vm_graphs(
    index: ClusterIndex,
    vm_of: NodeVms,
    apart: "Apart",
    constrained: list[Pod],
    settings: PlannerSettings,
    result: Plan,
) -> dict[str, Graph]:
    """Each cluster's affinity between VMs, and what its pods' anti-affinity terms select (for
    `apart` to make edges of), from the pods that hold terms."""
    # Every cluster with a placed pod is planned, so one that lost its last rule is emptied.
    graphs = {cluster: Graph() for cluster in vm_of.clusters_with_pods(index)}
    anti_kinds: tuple[TermKind, ...] = ("required_anti",)
    if settings.translate_preferred:
        anti_kinds = ("required_anti", "preferred_anti")
    for pod in constrained:
        record = index.pod(pod.key)
        if record is None or not record.terms:
            continue
        vm = vm_of(record.node)
        if vm is None:
            continue
        apart.collect(record, vm, anti_kinds)
        add_together(index, record, vm, vm_of, graphs[vm.cluster], result)
    return graphs


@dataclass(slots=True)
class _Selected:
    """What one anti-affinity term selects: its seed's key, and (pod, VM) per cluster."""

    seed: str
    by_cluster: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


class Apart:
    """Anti-affinity edges driven from the pods that hold the terms.

    A pod P on VM p with a host-domain anti-affinity term selecting pod Q on another VM q of the
    cluster keeps p and q apart, for P and Q. Asking each term which pods it selects, rather
    than each pod which terms select it, finds the same pairs at a cost that follows the terms,
    not the cluster. The replicas of a workload hold equal terms: each distinct term is looked
    up once per plan. `collect` reads the index; `add_edges` only what `collect` kept."""

    def __init__(self, index: ClusterIndex, vm_of: NodeVms) -> None:
        self._index = index
        self._vm_of = vm_of
        self._selected: dict[AffinityTerm, _Selected] = {}
        # Cluster → (owner's key, owner's VM, what one of its terms selects).
        self._owners: dict[str, list[tuple[str, str, _Selected]]] = {}

    def collect(self, owner: PodRecord, vm: Vm, kinds: tuple[TermKind, ...]) -> None:
        """What each host-domain anti-affinity term of the owner selects."""
        for kind in kinds:
            for term in getattr(owner.terms, kind):
                if term.physical:
                    owners = self._owners.setdefault(vm.cluster, [])
                    owners.append((owner.key, vm.moid, self._selected_by(term)))

    def add_edges(self, cluster: str, graph: Graph) -> None:
        """Edges from each owner's VM to every other VM of its cluster its term selects a pod
        on, and the term's seed where it selects its owner too (self-anti-affine replicas)."""
        for owner, mine, selected in self._owners.get(cluster, ()):
            selects_itself = False
            for key, moid in selected.by_cluster.get(cluster, ()):
                if key == owner:
                    selects_itself = True
                elif moid != mine:  # one VM cannot be split
                    graph.apart.setdefault(edge(mine, moid), set()).update((owner, key))
            if selects_itself:
                graph.seeds.setdefault(selected.seed, set()).add(mine)
                graph.seed_pods.setdefault(selected.seed, set()).add(owner)

    def _selected_by(self, term: AffinityTerm) -> _Selected:
        """The placed pods an existing pod's term selects, by cluster (another cluster never
        shares a host): the namespaces its namespaceSelector picks by their real labels, as
        `ClusterIndex.terms_matching` reads them."""
        selected = self._selected.get(term)
        if selected is None:
            selected = self._selected[term] = _Selected(anti_affinity_key(term))
            namespaces = self._index.namespaces
            for record in self._index.matching_pods(_EVERYWHERE, term.selector):
                ns_labels = namespaces.get(record.namespace, {})
                vm = self._vm_of(record.node)
                if vm is not None and term.matches(record.namespace, record.labels, ns_labels):
                    selected.by_cluster.setdefault(vm.cluster, []).append((record.key, vm.moid))
        return selected


def add_together(
    index: ClusterIndex,
    record: PodRecord,
    vm: Vm,
    vm_of: NodeVms,
    graph: Graph,
    result: Plan,
) -> None:
    """A VM-VM affinity edge where the pod's term is met on exactly one other VM."""
    for term in record.terms.required_affinity:
        if not term.physical:
            continue
        scope = incoming_scope(term, index.namespaces)
        vms = {
            vm_of(m.node) for m in index.matching_pods(scope, term.selector) if m.key != record.key
        }
        if not vms or vm in vms:
            continue  # nothing to be near yet, or a pod on its own VM already satisfies it
        if len(vms) == 1:
            (other,) = vms
            if other is not None and other.cluster == vm.cluster:
                graph.together.setdefault(edge(vm.moid, other.moid), set()).add(record.key)
                continue
        result.untranslatable.append(
            Untranslatable(
                vm.cluster,
                record.key,
                f"required affinity {term.describe()} is met by pods on {len(vms)} VMs; a DRS "
                "VM-VM affinity rule would keep all of them together, which is more than asked",
            )
        )


def host_domains(
    placements: Mapping[str, NodePlacement], hosts: Mapping[str, EsxiHost], vcenter: str
) -> int:
    """The domains a host spread counts: connected hosts carrying one of our node VMs, and the
    hosts of their clusters in or entering maintenance mode (they come back; meanwhile the
    spread's rule is held, not dropped)."""
    ours = [p for p in placements.values() if p.vcenter == vcenter]
    carrying = {p.host_moid for p in ours}
    clusters = {p.cluster_moid for p in ours}
    counted = {
        moid
        for moid, host in hosts.items()
        if host.connection_state == CONNECTED
        and (moid in carrying or (host.cluster_moid in clusters and is_away(host)))
    }
    return len(counted)


def add_spreads(
    index: ClusterIndex,
    pods: Iterable[Pod],
    vm_of: NodeVms,
    domains: int,
    graphs: dict[str, Graph],
) -> None:
    """Each host spread that means "one replica per host" as a clique of its replicas' VMs."""
    seen: set[tuple[str, SpreadConstraint]] = set()
    for pod in pods:
        if not pod.spec.topology_spread_constraints:
            continue
        narrowed = not required_node_affinity(pod).is_empty
        namespace = pod.metadata.namespace
        for constraint in compile_spread_constraints(pod, index.physical_anti_affinity):
            if (namespace, constraint) in seen or not _one_per_host(constraint, narrowed):
                continue
            seen.add((namespace, constraint))
            scope = NamespaceScope(everywhere=False, names=frozenset((namespace,)))
            replicas = [
                r for r in index.matching_pods(scope, constraint.selector) if not r.terminating
            ]
            placed = [(vm, r.key) for r in replicas if (vm := vm_of(r.node)) is not None]
            if len(placed) < len(replicas) or len(replicas) > domains:
                continue  # replicas outside our vCenter, or more replicas than hosts
            key = spread_key(namespace, constraint)
            for vm, pod_key in placed:
                graph = graphs.setdefault(vm.cluster, Graph())
                graph.seeds.setdefault(key, set()).add(vm.moid)
                graph.seed_pods.setdefault(key, set()).add(pod_key)
            for graph in graphs.values():
                members = sorted(graph.seeds.get(key, ()))
                for i, a in enumerate(members):
                    for b in members[i + 1 :]:
                        graph.apart.setdefault(edge(a, b), set()).update(graph.seed_pods[key])


def _one_per_host(constraint: SpreadConstraint, narrowed: bool) -> bool:
    """Whether the spread, with no more replicas than hosts, is exactly host anti-affinity."""
    return (
        constraint.physical
        and constraint.hard
        and constraint.max_skew == 1
        and not constraint.honors_taints
        and not (narrowed and constraint.honors_node_affinity)
    )
