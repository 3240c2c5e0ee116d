"""Required (and, when asked, preferred) node affinity on ESXi hosts as DRS VM-Host rules.

Node affinity `In` a set of hosts → VM group + host group + VM-Host rule per (cluster, set of
hosts asked for), "should" unless `vm_host_mandatory`. A VM that "must" rules send onto host sets
with no host in common cannot be placed anywhere: those rules are reported and *held* (neither
sent nor taken away). A "must" rule whose hosts are all in or entering maintenance is sent
*disabled*, `held_because` saying why: DRS would not move a VM off the last host it allows.
"""

from collections.abc import Iterable, Mapping
from dataclasses import replace

from hostaffinity.affinity.interpod import HOST_KEYS
from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.nodeaffinity import (
    NodeTerm,
    preferred_node_terms,
    required_node_affinity,
)
from hostaffinity.affinity.selectors import IN, Selector
from hostaffinity.drs_translator.core.naming import hosts_key, object_name
from hostaffinity.drs_translator.core.plan import (
    ClusterHosts,
    Conflict,
    NodeVms,
    Plan,
    PlannerSettings,
    is_away,
)
from hostaffinity.drs_translator.core.rules import DrsObject
from hostaffinity.schema import EsxiHost

# A VM-Host rule's identity: (cluster moid, host moids, mandatory).
_HostGroupKey = tuple[str, tuple[str, ...], bool]


def plan_host_rules(
    pods: Iterable[Pod],
    vm_of: NodeVms,
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
        away = tuple(m for m in moids if (h := hosts.get(m)) is not None and is_away(h))
        if mandatory and away == moids:
            what = "its VMs must run on these hosts only"
            reason = ClusterHosts(0, away).hold_reason(what)
            rule = replace(rule, enabled=False, held_because=reason)
            cluster_plan.maintenance_holds[rule.name] = away
        for obj in (vm_group, host_group, rule):
            cluster_plan.objects[obj.name] = obj


def _host_groups(
    pods: Iterable[Pod],
    vm_of: NodeVms,
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
    key = hosts_key(moids, mandatory)
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
