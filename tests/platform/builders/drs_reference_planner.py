"""The reference the planner is held to: how it built its VM graph before it was driven from the
pods that carry terms (test_planner_equivalence.py compares the two).

Every placed pod of the index asks `ClusterIndex.terms_matching` which anti-affinity terms
select it, and every pod as an API object is handed to the spread and host-rule steps. The
steps after the graph (cliques, holds, VM-Host rules) are the planner's own: they did not
change, and only what feeds them is under test here.
"""

from collections.abc import Iterable, Mapping

from hostaffinity.affinity.index import ClusterIndex, PodRecord, TermKind
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.core.cliques import edge
from hostaffinity.drs_translator.core.plan import ClusterHosts, NodeVms, Plan, PlannerSettings, Vm
from hostaffinity.drs_translator.core.vm_graph import Graph, add_spreads, add_together, host_domains
from hostaffinity.drs_translator.core.vm_host_rules import plan_host_rules
from hostaffinity.drs_translator.core.vm_vm_rules import plan_vm_rules
from hostaffinity.schema import EsxiHost, NodePlacement


def reference_plan(
    index: ClusterIndex,
    placements: Mapping[str, NodePlacement],
    hosts: Mapping[str, EsxiHost],
    pods: Iterable[Pod],
    settings: PlannerSettings,
) -> Plan:
    """The plan as every pod of the cluster visited in turn made it."""
    pods = list(pods)
    vm_of = NodeVms(placements, settings.vcenter)
    hosts = {h.moid: h for h in hosts.values() if h.vcenter == settings.vcenter}
    result = Plan()
    graphs: dict[str, Graph] = {}
    kinds: tuple[TermKind, ...] = ("required_anti",)
    if settings.translate_preferred:
        kinds = ("required_anti", "preferred_anti")
    for record in index.pods():
        vm = vm_of(record.node)
        if vm is None:
            continue
        graph = graphs.setdefault(vm.cluster, Graph())
        _add_apart_per_selected_pod(index, record, vm, vm_of, graph, kinds)
        add_together(index, record, vm, vm_of, graph, result)
    add_spreads(index, pods, vm_of, host_domains(placements, hosts, settings.vcenter), graphs)
    for cluster, graph in sorted(graphs.items()):
        plan_vm_rules(cluster, graph, ClusterHosts.of(hosts, cluster), result, settings.install)
    plan_host_rules(pods, vm_of, hosts, settings, result)
    return result


def _add_apart_per_selected_pod(
    index: ClusterIndex,
    record: PodRecord,
    vm: Vm,
    vm_of: NodeVms,
    graph: Graph,
    kinds: tuple[TermKind, ...],
) -> None:
    """Edges from every host-domain anti-affinity term that selects this pod, and the seeds of
    its own terms that select itself."""
    for kind in kinds:
        for owner, term in index.terms_matching(kind, record.namespace, record.labels):
            if not term.physical or owner.key == record.key:
                continue
            other = vm_of(owner.node)
            if other is None or other.cluster != vm.cluster or other.moid == vm.moid:
                continue
            graph.apart.setdefault(edge(vm.moid, other.moid), set()).update((owner.key, record.key))
    ns_labels = index.namespaces.get(record.namespace, {})
    for kind in kinds:
        for term in getattr(record.terms, kind):
            if term.physical and term.matches(record.namespace, record.labels, ns_labels):
                key = f"anti:{term.describe()}"
                graph.seeds.setdefault(key, set()).add(vm.moid)
                graph.seed_pods.setdefault(key, set()).add(record.key)
