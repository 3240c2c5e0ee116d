"""What DRS should hold, per vSphere cluster: a pure function of pods, namespaces and topology.

Like the node-labeller's `reconcile.py`: state in, a plan out; the applier does the I/O. Term
matching is the affinity engine's (`ClusterIndex.matching_pods`, `AffinityTerm.matches`,
`incoming_scope`), so namespaces, namespaceSelector and the matchLabelKeys the API server merged
into the selectors mean here exactly what they mean to kube-scheduler. Only terms on the ESXi-host
domain are translated (`hostaffinity.io/esxi-host`, `alpha.cna.vmware.com/host`, and
`kubernetes.io/hostname` anti-affinity read physically under the opt-in).

- Required anti-affinity → VM-VM anti-affinity rules, one per clique of the VM graph
  (`cliques.py`), never stronger than asked.
- Required affinity → a VM-VM affinity rule only when the pod's term is met by pods on exactly
  one other VM ("be with that VM" is then exactly what was asked); otherwise not translatable.
- Required node affinity `In` a set of hosts → VM group + host group + VM-Host rule ("should"
  unless `vm_host_mandatory`).
- Preferred terms only with `translate_preferred` (DRS rules have no weight), and then only host
  anti-affinity and node affinity on hosts: a preferred pod affinity held as a VM-VM affinity
  rule would be as firm as a required one and could hold required anti-affinity back as a
  together-and-apart conflict, so it is never translated.
- A topology spread over ESXi hosts → the same VM-VM anti-affinity rule as required host
  anti-affinity, only where the spread means exactly "each replica on its own host":
  `maxSkew: 1`, `DoNotSchedule`, no node inclusion narrowing the hosts (no required node
  affinity honoured, taints ignored), and no more replicas than the hosts their nodes are on
  (connected, not in maintenance). With N replicas over H >= N hosts, a skew of at most 1
  leaves no host with two. Anything else (a larger maxSkew, ScheduleAnyway, more replicas than
  hosts) asks for balance, which DRS has no rule for: nothing is sent, and kube-scheduler and
  the descheduler keep the spread.
- What DRS cannot satisfy (a clique larger than the usable hosts, a pair kept together and
  apart, a VM that "must" VM-Host rules send onto host sets with no host in common) is reported
  as a conflict and *held*: the rule is neither sent nor taken away.
- Maintenance is never blocked by us. A host stops being usable as soon as it starts *entering*
  maintenance mode (the node-labeller's `entering_maintenance`), not once it is in it: DRS will
  not evacuate a host if that breaks an enabled VM-VM anti-affinity rule, nor move a VM off the
  last host a "must" VM-Host rule allows. Such a rule, which the hosts would satisfy but for the
  ones in or entering maintenance, is kept and sent *disabled*, `held_because` saying why; it is
  enabled again once those hosts are back or others make room. A host spread counts the hosts
  in maintenance as domains, so its rule is held like the others rather than dropped.
"""

from collections.abc import Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from hostaffinity.affinity.index import ClusterIndex, PodRecord, TermKind
from hostaffinity.affinity.interpod import HOST_KEYS, AffinityTerm, NamespaceScope, incoming_scope
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.nodeaffinity import (
    NodeTerm,
    preferred_node_terms,
    required_node_affinity,
)
from hostaffinity.affinity.selectors import IN, Selector
from hostaffinity.affinity.topology_spread import SpreadConstraint, compile_spread_constraints
from hostaffinity.drs_translator.core.cliques import Clique, cover_with_cliques, edge
from hostaffinity.drs_translator.core.rules import ConflictReason, DrsObject, object_name
from hostaffinity.schema import EsxiHost, NodePlacement

CONNECTED: Final = "connected"
_EVERYWHERE: Final = NamespaceScope(everywhere=True)
# A VM-Host rule's identity: (cluster moid, host moids, mandatory).
_HostGroupKey = tuple[str, tuple[str, ...], bool]


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    vcenter: str
    # This install's token (drs_names.install_token of the cluster identity): it names every
    # rule and group, so that installs sharing the vCenter never name one alike.
    install: str
    # VM-Host rules as "must" (DRS and HA never break them) instead of "should".
    vm_host_mandatory: bool = False
    # Translate preferred host anti-affinity and preferred host node affinity too (the latter as
    # "should"); preferred pod affinity never.
    translate_preferred: bool = False


@dataclass(frozen=True, slots=True)
class Conflict:
    """A rule DRS could not satisfy: reported, not sent."""

    cluster_moid: str
    name: str
    reason: ConflictReason
    message: str
    vms: tuple[str, ...]
    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """A pod whose host-level term DRS cannot express exactly."""

    cluster_moid: str
    pod: str
    message: str


@dataclass(slots=True)
class ClusterPlan:
    """Desired rules and groups of one cluster; `held` names are left as vCenter has them."""

    cluster_moid: str
    objects: dict[str, DrsObject] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    # Rules sent disabled while hosts are in or entering maintenance: name → those hosts' moids.
    maintenance_holds: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class Plan:
    clusters: dict[str, ClusterPlan] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    untranslatable: list[Untranslatable] = field(default_factory=list)

    def cluster(self, moid: str) -> ClusterPlan:
        return self.clusters.setdefault(moid, ClusterPlan(moid))


@dataclass(frozen=True, slots=True)
class _Vm:
    moid: str
    cluster: str


@dataclass(slots=True)
class _Graph:
    """One cluster's constraints between VMs, with the pods behind each."""

    apart: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    seeds: dict[str, set[str]] = field(default_factory=dict)
    seed_pods: dict[str, set[str]] = field(default_factory=dict)
    together: dict[tuple[str, str], set[str]] = field(default_factory=dict)


class _Placements:
    """Node → VM for the nodes of our vCenter."""

    def __init__(self, placements: Mapping[str, NodePlacement], vcenter: str) -> None:
        self._vm = {
            node: _Vm(p.vm_moid, p.cluster_moid)
            for node, p in placements.items()
            if p.vcenter == vcenter and p.cluster_moid
        }
        self._nodes_of: dict[str, list[str]] = {}
        for node, vm in self._vm.items():
            self._nodes_of.setdefault(vm.cluster, []).append(node)

    def __call__(self, node: str) -> _Vm | None:
        return self._vm.get(node)

    def clusters_with_pods(self, index: ClusterIndex) -> set[str]:
        """The clusters of our VMs that carry at least one indexed pod (each cluster's nodes are
        looked at until one has a pod: one or two per cluster in a busy one)."""
        return {
            cluster
            for cluster, nodes in self._nodes_of.items()
            if any(next(index.pods_on(node), None) is not None for node in nodes)
        }


def asks_for_placement(pod: Pod) -> bool:
    """Whether the pod's spec carries anything the planner reads: inter-pod (anti-)affinity,
    node affinity or a nodeSelector, or a topology spread. The other pods (most of them) only
    count as what those terms select, which the index answers; the planner never visits them."""
    spec = pod.spec
    return (
        spec.affinity is not None
        or spec.node_selector is not None
        or bool(spec.topology_spread_constraints)
    )


def plan(
    index: ClusterIndex,
    placements: Mapping[str, NodePlacement],
    hosts: Mapping[str, EsxiHost],
    constrained: Iterable[Pod],
    settings: PlannerSettings,
    existing: Mapping[str, Collection[str]] | None = None,
) -> Plan:
    """The desired DRS state of every cluster that has placed pods or host rules, in one go
    (`Planning` says what the arguments are)."""
    planning = Planning(index, placements, hosts, constrained, settings, existing)
    for _ in planning.steps():
        pass
    return planning.result


class Planning:
    """The desired DRS state of every cluster that has placed pods or host rules, made in steps
    between which the caller may run other work.

    `index` holds the assigned pods and the namespaces; `constrained` are, as API objects, at
    least the pods for which `asks_for_placement` holds (node affinity is read from the spec,
    which the index does not keep; other pods passed are skipped). The cost follows the pods
    with terms and what their terms select, not the cluster's size. Only the nodes and hosts of
    `settings.vcenter` count: a plan is for one vCenter.

    Construction reads every input, in one piece: which pods each anti-affinity term selects,
    the affinity and spread edges of each cluster's VM graph. Each of `steps()` then adds one
    cluster's anti-affinity edges and plans its rules, the last the VM-Host rules, from what
    construction kept and this plan's own copies of the placements, hosts and pods. So the
    inputs may change between steps (informers on the same event loop) without the plan mixing
    two states. `result` is complete once the steps are done. `existing` names our rules in
    vCenter now, by cluster (the ownership records): of two groups whose VMs are the same, the
    one whose rule exists keeps it, so no rule is renamed when a group arrives.
    """

    def __init__(
        self,
        index: ClusterIndex,
        placements: Mapping[str, NodePlacement],
        hosts: Mapping[str, EsxiHost],
        constrained: Iterable[Pod],
        settings: PlannerSettings,
        existing: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self.result = Plan()
        self._settings = settings
        self._existing = {cluster: frozenset(names) for cluster, names in (existing or {}).items()}
        self._constrained = list(constrained)
        self._vm_of = _Placements(placements, settings.vcenter)
        # Our vCenter's hosts by moid: moids repeat across vCenters, the KV keys them apart.
        self._hosts = {h.moid: h for h in hosts.values() if h.vcenter == settings.vcenter}
        self._apart = _Apart(index, self._vm_of)
        self._graphs = _graphs(
            index, self._vm_of, self._apart, self._constrained, settings, self.result
        )
        domains = _host_domains(placements, self._hosts, settings.vcenter)
        _add_spreads(index, self._constrained, self._vm_of, domains, self._graphs)

    def steps(self) -> Iterator[None]:
        """Plan the rest, one cluster's VM rules per step, then the VM-Host rules."""
        for cluster, graph in sorted(self._graphs.items()):
            self._apart.add_edges(cluster, graph)
            hosts = ClusterHosts.of(self._hosts, cluster)
            existing = self._existing.get(cluster, frozenset())
            _plan_vm_rules(cluster, graph, hosts, self.result, self._settings.install, existing)
            yield
        _plan_host_rules(self._constrained, self._vm_of, self._hosts, self._settings, self.result)
        # By pod, not by the order pods arrived in: the same state gives the same plan.
        self.result.untranslatable.sort(key=lambda problem: (problem.pod, problem.message))


def _graphs(
    index: ClusterIndex,
    vm_of: _Placements,
    apart: "_Apart",
    constrained: list[Pod],
    settings: PlannerSettings,
    result: Plan,
) -> dict[str, _Graph]:
    """Each cluster's affinity between VMs, and what its pods' anti-affinity terms select (for
    `apart` to make edges of), from the pods that hold terms."""
    # Every cluster with a placed pod is planned, so one that lost its last rule is emptied.
    graphs = {cluster: _Graph() for cluster in vm_of.clusters_with_pods(index)}
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
        _add_together(index, record, vm, vm_of, graphs[vm.cluster], result)
    return graphs


class _Apart:
    """Anti-affinity edges driven from the pods that hold the terms.

    A pod P on VM p with a host-domain anti-affinity term selecting pod Q on another VM q of the
    cluster keeps p and q apart, for P and Q. Asking each term which pods it selects, rather
    than each pod which terms select it, finds the same pairs at a cost that follows the terms,
    not the cluster. The replicas of a workload hold equal terms: each distinct term is looked
    up once per plan. `collect` reads the index; `add_edges` only what `collect` kept."""

    def __init__(self, index: ClusterIndex, vm_of: _Placements) -> None:
        self._index = index
        self._vm_of = vm_of
        self._selected: dict[AffinityTerm, _Selected] = {}
        # Cluster → (owner's key, owner's VM, what one of its terms selects).
        self._owners: dict[str, list[tuple[str, str, _Selected]]] = {}

    def collect(self, owner: PodRecord, vm: _Vm, kinds: tuple[TermKind, ...]) -> None:
        """What each host-domain anti-affinity term of the owner selects."""
        for kind in kinds:
            for term in getattr(owner.terms, kind):
                if term.physical:
                    owners = self._owners.setdefault(vm.cluster, [])
                    owners.append((owner.key, vm.moid, self._selected_by(term)))

    def add_edges(self, cluster: str, graph: _Graph) -> None:
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

    def _selected_by(self, term: AffinityTerm) -> "_Selected":
        """The placed pods an existing pod's term selects, by cluster (another cluster never
        shares a host): the namespaces its namespaceSelector picks by their real labels, as
        `ClusterIndex.terms_matching` reads them."""
        selected = self._selected.get(term)
        if selected is None:
            selected = self._selected[term] = _Selected(f"anti:{term.describe()}")
            namespaces = self._index.namespaces
            for record in self._index.matching_pods(_EVERYWHERE, term.selector):
                ns_labels = namespaces.get(record.namespace, {})
                vm = self._vm_of(record.node)
                if vm is not None and term.matches(record.namespace, record.labels, ns_labels):
                    selected.by_cluster.setdefault(vm.cluster, []).append((record.key, vm.moid))
        return selected


@dataclass(slots=True)
class _Selected:
    """What one anti-affinity term selects: its seed's key, and (pod, VM) per cluster."""

    seed: str
    by_cluster: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def _add_together(
    index: ClusterIndex,
    record: PodRecord,
    vm: _Vm,
    vm_of: _Placements,
    graph: _Graph,
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


def _host_domains(
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
        and (moid in carrying or (host.cluster_moid in clusters and _away(host)))
    }
    return len(counted)


def _add_spreads(
    index: ClusterIndex,
    pods: Iterable[Pod],
    vm_of: _Placements,
    domains: int,
    graphs: dict[str, _Graph],
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
            key = f"topology spread in {namespace}: {constraint.describe()}, one replica per host"
            for vm, pod_key in placed:
                graph = graphs.setdefault(vm.cluster, _Graph())
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


def _away(host: EsxiHost) -> bool:
    """In maintenance mode or on the way in: DRS places nothing there."""
    return host.in_maintenance_mode or host.entering_maintenance


@dataclass(frozen=True, slots=True)
class ClusterHosts:
    """A cluster's connected hosts: how many DRS may use, and which are (entering) maintenance."""

    usable: int
    away: tuple[str, ...]

    @classmethod
    def of(cls, hosts: Mapping[str, EsxiHost], cluster: str) -> "ClusterHosts":
        connected = [
            h
            for h in hosts.values()
            if h.cluster_moid == cluster and h.connection_state == CONNECTED
        ]
        away = tuple(sorted(h.moid for h in connected if _away(h)))
        return cls(len(connected) - len(away), away)

    def hold_reason(self, what: str) -> str:
        return (
            f"held so that hosts {', '.join(self.away)} can enter maintenance mode: {what}; "
            "restored when they are back or other hosts make room"
        )


def _plan_vm_rules(
    cluster: str,
    graph: _Graph,
    hosts: ClusterHosts,
    result: Plan,
    install: str,
    existing: Container[str] = frozenset(),
) -> None:
    """`existing`: the names of our rules in the cluster now (kept when another group's clique
    has the same VMs); `install` names them."""
    cluster_plan = result.cluster(cluster)
    seeds = {key: frozenset(vms) for key, vms in graph.seeds.items()}
    components = _components(graph.together)

    def exists(key: str) -> bool:
        return object_name("vm-anti-affinity", cluster, key, install) in existing

    for clique in cover_with_cliques(graph.apart, seeds, exists):
        name = object_name("vm-anti-affinity", cluster, clique.key, install)
        pods = _clique_pods(clique, graph)
        vms = tuple(sorted(clique.vms))
        obj = DrsObject(
            name=name,
            kind="vm-anti-affinity",
            cluster_moid=cluster,
            vms=vms,
            pods=pods,
            reason=clique.key,
        )
        if len(vms) > hosts.usable + len(hosts.away):
            _hold(
                result,
                cluster_plan,
                obj,
                "too-few-hosts",
                f"{len(vms)} VMs must be on different hosts, but cluster {cluster} has "
                f"{hosts.usable + len(hosts.away)} connected hosts (counting those in or "
                "entering maintenance)",
            )
            continue
        split = [c for c in components if len(c & clique.vms) >= 2]
        if split:
            _hold(
                result,
                cluster_plan,
                obj,
                "together-and-apart",
                "VMs " + ", ".join(sorted(split[0] & clique.vms)) + " are asked to be both "
                "on one host and on different hosts",
            )
            continue
        if len(vms) > hosts.usable:
            what = f"{len(vms)} VMs kept apart, {hosts.usable} hosts left"
            obj = replace(obj, enabled=False, held_because=hosts.hold_reason(what))
            cluster_plan.maintenance_holds[name] = hosts.away
        cluster_plan.objects[name] = obj
    for component in components:
        vms = tuple(sorted(component))
        name = object_name("vm-affinity", cluster, "together:" + ",".join(vms), install)
        asked = sorted(
            {p for pair, by in graph.together.items() if pair[0] in component for p in by}
        )
        obj = DrsObject(
            name=name,
            kind="vm-affinity",
            cluster_moid=cluster,
            vms=vms,
            pods=tuple(asked),
            reason="required affinity on the ESXi host",
        )
        if any(edge(a, b) in graph.apart for a in vms for b in vms if a < b):
            _hold(
                result,
                cluster_plan,
                obj,
                "together-and-apart",
                "these VMs are asked to be on one host, and some of them apart",
            )
            continue
        cluster_plan.objects[name] = obj


def _hold(
    result: Plan, cluster_plan: ClusterPlan, obj: DrsObject, reason: ConflictReason, text: str
) -> None:
    cluster_plan.held.add(obj.name)
    result.conflicts.append(Conflict(obj.cluster_moid, obj.name, reason, text, obj.vms, obj.pods))


def _clique_pods(clique: Clique, graph: _Graph) -> tuple[str, ...]:
    """The pods its rule stands for: its group's, and those of the cliques it covers."""
    pods: set[str] = set()
    for part in (clique, *clique.covered):
        if part.key in graph.seed_pods:
            pods.update(graph.seed_pods[part.key])
            continue
        vms = sorted(part.vms)
        for i, a in enumerate(vms):
            for b in vms[i + 1 :]:
                pods.update(graph.apart.get(edge(a, b), ()))
    return tuple(sorted(pods))


def _components(pairs: Iterable[tuple[str, str]]) -> list[frozenset[str]]:
    """Connected components of the keep-together graph (together is transitive)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    groups: dict[str, set[str]] = {}
    for x in parent:
        groups.setdefault(find(x), set()).add(x)
    return sorted((frozenset(g) for g in groups.values()), key=sorted)


def _plan_host_rules(
    pods: Iterable[Pod],
    vm_of: _Placements,
    hosts: Mapping[str, EsxiHost],
    settings: PlannerSettings,
    result: Plan,
) -> None:
    """VM group + host group + VM-Host rule per (cluster, set of hosts asked for)."""
    groups = _host_groups(pods, vm_of, hosts, settings)
    stranded = _stranded_vms(groups)
    for (cluster, moids, mandatory), by_vm in sorted(groups.items()):
        cluster_plan = result.cluster(cluster)
        objects = _vm_host_objects(cluster, moids, mandatory, by_vm, settings.install)
        clashing = sorted(vm for vm in by_vm if mandatory and (cluster, vm) in stranded)
        if clashing:
            cluster_plan.held.update(obj.name for obj in objects)
            result.conflicts.append(_no_common_host(objects[-1], moids, clashing, by_vm))
            continue
        vm_group, host_group, rule = objects
        away = tuple(m for m in moids if (h := hosts.get(m)) is not None and _away(h))
        if mandatory and away == moids:
            what = "its VMs must run on these hosts only"
            reason = ClusterHosts(0, away).hold_reason(what)
            rule = replace(rule, enabled=False, held_because=reason)
            cluster_plan.maintenance_holds[rule.name] = away
        for obj in (vm_group, host_group, rule):
            cluster_plan.objects[obj.name] = obj


def _host_groups(
    pods: Iterable[Pod],
    vm_of: _Placements,
    hosts: Mapping[str, EsxiHost],
    settings: PlannerSettings,
) -> dict[_HostGroupKey, dict[str, set[str]]]:
    """(cluster, host moids asked for, must) → VM → the pods on it that asked for those hosts."""
    hosts_by_label: dict[tuple[str, str], str] = {
        (h.cluster_moid, h.label): h.moid for h in hosts.values()
    }
    groups: dict[_HostGroupKey, dict[str, set[str]]] = {}
    for pod in pods:
        if not _selects_nodes(pod):
            continue
        vm = vm_of(pod.spec.node_name) if pod.spec.node_name else None
        if vm is None or pod.status.phase in ("Succeeded", "Failed"):
            continue
        wanted = [(required_host_labels(pod), settings.vm_host_mandatory)]
        if settings.translate_preferred:
            wanted += [(labels, False) for labels in preferred_host_labels(pod)]
        for labels, mandatory in wanted:
            if labels is None:
                continue
            moids = tuple(
                sorted({m for lb in labels if (m := hosts_by_label.get((vm.cluster, lb)))})
            )
            if not moids:
                continue
            asked = groups.setdefault((vm.cluster, moids, mandatory), {})
            asked.setdefault(vm.moid, set()).add(pod.metadata.namespace + "/" + pod.metadata.name)
    return groups


def _selects_nodes(pod: Pod) -> bool:
    """Whether the pod has a nodeSelector or node affinity (else it asks for no host)."""
    affinity = pod.spec.affinity
    return pod.spec.node_selector is not None or (
        affinity is not None and affinity.node_affinity is not None
    )


def _vm_host_objects(
    cluster: str,
    moids: tuple[str, ...],
    mandatory: bool,
    by_vm: Mapping[str, set[str]],
    install: str,
) -> tuple[DrsObject, DrsObject, DrsObject]:
    """The VM group, host group and VM-Host rule (last) for one host group key."""
    key = f"hosts:{','.join(moids)}:{'must' if mandatory else 'should'}"
    vm_group = object_name("vm-group", cluster, key, install)
    host_group = object_name("host-group", cluster, key, install)
    pods_asked = tuple(sorted(set().union(*by_vm.values())))
    reason = f"node affinity on hosts {', '.join(moids)}"
    return (
        DrsObject(
            name=vm_group,
            kind="vm-group",
            cluster_moid=cluster,
            vms=tuple(sorted(by_vm)),
            pods=pods_asked,
            reason=reason,
        ),
        DrsObject(
            name=host_group,
            kind="host-group",
            cluster_moid=cluster,
            hosts=moids,
            pods=pods_asked,
            reason=reason,
        ),
        DrsObject(
            name=object_name("vm-host", cluster, key, install),
            kind="vm-host",
            cluster_moid=cluster,
            vm_group=vm_group,
            host_group=host_group,
            mandatory=mandatory,
            pods=pods_asked,
            reason=reason,
        ),
    )


def _no_common_host(
    rule: DrsObject, moids: tuple[str, ...], clashing: list[str], by_vm: Mapping[str, set[str]]
) -> Conflict:
    """Why a "must" rule is held: these VMs are also sent onto hosts outside `moids`."""
    return Conflict(
        rule.cluster_moid,
        rule.name,
        "no-common-host",
        f"VMs {', '.join(clashing)} are sent by this 'must' rule onto hosts "
        f"{', '.join(moids)} and by another 'must' rule onto hosts none of these",
        tuple(clashing),
        tuple(sorted(set().union(*(by_vm[vm] for vm in clashing)))),
    )


def _stranded_vms(groups: Mapping[_HostGroupKey, Mapping[str, object]]) -> set[tuple[str, str]]:
    """(cluster, VM) that "must" VM-Host rules send onto host sets with no host in common: DRS
    cannot place such a VM anywhere. "Should" rules may be broken, so they never strand one."""
    allowed: dict[tuple[str, str], frozenset[str]] = {}
    for (cluster, moids, mandatory), by_vm in groups.items():
        if not mandatory:
            continue
        for vm in by_vm:
            hosts = allowed.get((cluster, vm), frozenset(moids))
            allowed[(cluster, vm)] = hosts & frozenset(moids)
    return {key for key, hosts in allowed.items() if not hosts}


def _host_labels_of(selector: Selector) -> frozenset[str] | None:
    """The host label values a selector allows, or None when it says nothing about hosts."""
    allowed: frozenset[str] | None = None
    for requirement in selector.requirements:
        if requirement.key in HOST_KEYS and requirement.op == IN:
            values = frozenset(requirement.values)
            allowed = values if allowed is None else allowed & values
    return allowed


def _union_of_terms(terms: Iterable[NodeTerm]) -> frozenset[str] | None:
    """Terms are ORed: hosts are constrained only when every term constrains them."""
    union: set[str] = set()
    for term in terms:
        labels = _host_labels_of(term.labels)
        if labels is None:
            return None
        union |= labels
    return frozenset(union)


def required_host_labels(pod: Pod) -> frozenset[str] | None:
    """Host label values the pod's nodeSelector and required node affinity allow (None: any)."""
    required = required_node_affinity(pod)
    allowed = None
    if required.node_selector is not None:
        allowed = _host_labels_of(required.node_selector)
    if required.terms:
        from_terms = _union_of_terms(required.terms)
        if from_terms is not None:
            allowed = from_terms if allowed is None else allowed & from_terms
    return allowed


def preferred_host_labels(pod: Pod) -> list[frozenset[str]]:
    """Host label values of each preferred node affinity term that names hosts."""
    found = (_host_labels_of(term.labels) for _weight, term in preferred_node_terms(pod))
    return [labels for labels in found if labels]
