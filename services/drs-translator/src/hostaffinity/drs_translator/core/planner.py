"""What DRS should hold, per vSphere cluster: a pure function of pods, namespaces and topology.

Like the node-labeller's `reconcile.py`: state in, a plan out; the applier does the I/O. Term
matching is the affinity engine's (`ClusterIndex.matching_pods`, `AffinityTerm.matches`,
`incoming_scope`), so namespaces, namespaceSelector and the matchLabelKeys the API server merged
into the selectors mean here exactly what they mean to kube-scheduler. Only terms on the ESXi-host
domain are translated (`hostaffinity.io/esxi-host`, `alpha.cna.vmware.com/host`, and
`kubernetes.io/hostname` anti-affinity read physically under the opt-in).

This module composes the steps, one concern each, like the plugins of kube-scheduler's and the
descheduler's plugin folders:

- `vm_graph.py`: each cluster's VM graph (apart, together, host spreads) from the pods' terms;
- `vm_vm_rules.py`: the graph as VM-VM rules, one per clique (`cliques.py`) or affinity component;
- `vm_host_rules.py`: node affinity on hosts as VM group + host group + VM-Host rule;
- `naming.py`: the group keys and names of what they ask for; `plan.py`: settings and the plan.

Preferred terms only with `translate_preferred` (DRS rules have no weight), and then only host
anti-affinity and node affinity on hosts: a preferred pod affinity held as a VM-VM affinity rule
would be as firm as a required one and could hold required anti-affinity back as a
together-and-apart conflict, so it is never translated. What DRS cannot satisfy is reported as a
conflict and *held*; what would block maintenance is sent *disabled* (the step modules say when).
A host spread counts the hosts in maintenance as domains, so its rule is held like the others
rather than dropped.
"""

from collections.abc import Collection, Iterable, Iterator, Mapping

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.core.plan import ClusterHosts, NodeVms, Plan, PlannerSettings
from hostaffinity.drs_translator.core.vm_graph import Apart, add_spreads, host_domains, vm_graphs
from hostaffinity.drs_translator.core.vm_host_rules import plan_host_rules
from hostaffinity.drs_translator.core.vm_vm_rules import plan_vm_rules
from hostaffinity.schema import EsxiHost, NodePlacement


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
        self._vm_of = NodeVms(placements, settings.vcenter)
        # Our vCenter's hosts by moid: moids repeat across vCenters, the KV keys them apart.
        self._hosts = {h.moid: h for h in hosts.values() if h.vcenter == settings.vcenter}
        self._apart = Apart(index, self._vm_of)
        self._graphs = vm_graphs(
            index, self._vm_of, self._apart, self._constrained, settings, self.result
        )
        domains = host_domains(placements, self._hosts, settings.vcenter)
        add_spreads(index, self._constrained, self._vm_of, domains, self._graphs)

    def steps(self) -> Iterator[None]:
        """Plan the rest, one cluster's VM rules per step, then the VM-Host rules."""
        for cluster, graph in sorted(self._graphs.items()):
            self._apart.add_edges(cluster, graph)
            hosts = ClusterHosts.of(self._hosts, cluster)
            existing = self._existing.get(cluster, frozenset())
            plan_vm_rules(cluster, graph, hosts, self.result, self._settings.install, existing)
            yield
        plan_host_rules(self._constrained, self._vm_of, self._hosts, self._settings, self.result)
        # By pod, not by the order pods arrived in: the same state gives the same plan.
        self.result.untranslatable.sort(key=lambda problem: (problem.pod, problem.message))
