"""A cluster's VM graph as DRS VM-VM rules, never stronger than the pods asked.

- Apart → VM-VM anti-affinity rules, one per clique of the graph (`cliques.py`).
- Together → one VM-VM affinity rule per connected component (together is transitive).
- What DRS cannot satisfy (a clique larger than the cluster's connected hosts, VMs kept together
  and apart) is reported as a conflict and *held*: the rule is neither sent nor taken away.
- Maintenance is never blocked by us: a host stops being usable as soon as it starts *entering*
  maintenance mode, not once it is in it, since DRS will not evacuate a host if that breaks an
  enabled anti-affinity rule. A rule the hosts would satisfy but for those is sent *disabled*,
  `held_because` saying why, and enabled again once they are back or others make room.
"""

from collections.abc import Container, Iterable
from dataclasses import replace

from hostaffinity.drs_translator.core.cliques import Clique, cover_with_cliques, edge
from hostaffinity.drs_translator.core.naming import object_name, together_key
from hostaffinity.drs_translator.core.plan import ClusterHosts, ClusterPlan, Conflict, Plan
from hostaffinity.drs_translator.core.rules import ConflictReason, DrsObject
from hostaffinity.drs_translator.core.vm_graph import Graph


def plan_vm_rules(
    cluster: str,
    graph: Graph,
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
        name = object_name("vm-affinity", cluster, together_key(vms), install)
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


def _clique_pods(clique: Clique, graph: Graph) -> tuple[str, ...]:
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
