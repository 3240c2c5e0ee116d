"""Inter-pod affinity terms: compiled once per pod, with namespace scope and physical reading.

Semantics: pkg/scheduler/framework/types.go (AffinityTerm, NewPodInfo) and
pkg/scheduler/framework/plugins/interpodaffinity/plugin.go (mergeAffinityTermNamespacesIfNotEmpty)
at v1.36. A term with neither `namespaces` nor `namespaceSelector` covers its own pod's namespace;
a null `namespaceSelector` selects no namespace, `{}` selects all.

The physical reading: with the opt-in (pod annotation or cluster-wide), a `kubernetes.io/hostname`
anti-affinity term is compiled as a term on the ESXi-host domain, because spreading replicas over
VMs that share one host is not what the user asked for (ARCHITECTURE.md "Topology model").
A term read physically leaves out the pods of the reading pod's own KubeVirt VMI (same
`kubevirt.io/created-by`): a migration target carries its source's labels, and its source's
host must stay open to it, as the source's node is natively. It is the `NotIn` requirement the
admission webhook puts in the selector of the host twin it adds; the
required term then also stays on the hostname as written, as the webhook keeps it beside the
twin, so the VM's own pods are still kept off each other's node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from hostaffinity.affinity.model import (
    LabelSelector,
    LabelSelectorRequirement,
    Pod,
    PodAffinity,
    PodAffinityTerm,
)
from hostaffinity.affinity.selectors import (
    IN,
    NOT_IN,
    Selector,
    compile_label_selector,
)
from hostaffinity.affinity.sharing import Interner
from hostaffinity.schema.names import (
    LABEL_ESXI_HOST,
    LABEL_KUBEVIRT_MIGRATION_JOB,
    LABEL_KUBEVIRT_VMI_UID,
    LABEL_LEGACY_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
)

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
# Topology keys whose domain is the physical ESXi host: resolved through the placement map first.
HOST_KEYS: Final = frozenset({LABEL_ESXI_HOST, LABEL_LEGACY_HOST})


class AffinityTerm(msgspec.Struct, frozen=True, gc=False):
    """One compiled pod (anti-)affinity term.

    `declared_key` is the topology key as written; `topology_key` the one decided on, which
    differs only for a hostname anti-affinity term read physically.
    """

    selector: Selector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: Selector
    weight: int = 0
    declared_key: str = ""

    @property
    def physical(self) -> bool:
        """Whether the term's domain is the ESXi host (the extender decides these)."""
        return self.topology_key in HOST_KEYS

    def matches(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str]
    ) -> bool:
        """AffinityTerm.Matches: an existing pod's term against another pod, API semantics."""
        if namespace in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(labels)
        return False

    def describe(self) -> str:
        """Human form: selector, namespaces, topology key (and how it was read)."""
        scope = []
        if self.namespaces:
            scope.append(f"namespaces [{', '.join(sorted(self.namespaces))}]")
        if not self.namespace_selector.nothing:
            scope.append(f"namespaceSelector {self.namespace_selector.describe()}")
        key = self.topology_key
        if self.declared_key and self.declared_key != key:
            key = f"{key} (physical reading of {self.declared_key})"
        where = f" in {' or '.join(scope)}" if scope else ""
        return f"{self.selector.describe()}{where} on topology key {key}"


class PodTerms(msgspec.Struct, frozen=True, gc=False):
    """All of a pod's inter-pod terms, by kind."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti: tuple[AffinityTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.required_affinity
            or self.required_anti
            or self.preferred_affinity
            or self.preferred_anti
        )


NO_TERMS: Final = PodTerms()
# Replicas compile equal terms: the index keeps one PodTerms per workload, not one per pod.
_SHARED_TERMS: Final[Interner[PodTerms, PodTerms]] = Interner()


class NamespaceScope(msgspec.Struct, frozen=True, gc=False):
    """The namespaces an incoming pod's term looks at: all, or a fixed set."""

    everywhere: bool
    names: frozenset[str] = frozenset()

    def __contains__(self, namespace: object) -> bool:
        return self.everywhere or namespace in self.names


# The shared setting `physical_anti_affinity`, by the values of its config key: "opt-in", a pod's
# annotation turns its kubernetes.io/hostname anti-affinity into ESXi-host anti-affinity;
# "cluster-wide", every pod's; "disabled", no pod's.
PhysicalAntiAffinity = Literal["opt-in", "cluster-wide", "disabled"]


def reads_physically(
    physical_anti_affinity: PhysicalAntiAffinity, annotations: Mapping[str, Any]
) -> bool:
    """Whether a pod with these annotations has its hostname terms read as ESXi-host terms: the
    one rule the engine and the admission webhook both follow."""
    if physical_anti_affinity == "disabled":
        return False
    return (
        physical_anti_affinity == "cluster-wide"
        or annotations.get(POD_PHYSICAL_ANTI_AFFINITY) == "true"
    )


def physical_opt_in(pod: Pod, physical_anti_affinity: PhysicalAntiAffinity) -> bool:
    """Whether the pod's hostname anti-affinity terms are read as ESXi-host terms."""
    return reads_physically(physical_anti_affinity, pod.metadata.annotations)


def runs_a_vm(pod: Pod) -> bool:
    """A KubeVirt virt-launcher pod: it carries its VMI's uid."""
    return LABEL_KUBEVIRT_VMI_UID in pod.metadata.labels


def migration_target(pod: Pod) -> bool:
    """The target virt-launcher pod of a KubeVirt live migration (its source still runs)."""
    return runs_a_vm(pod) and LABEL_KUBEVIRT_MIGRATION_JOB in pod.metadata.labels


def without_own_vm(pod: Pod, selector: LabelSelector | None) -> LabelSelector | None:
    """The selector leaving out the pods of `pod`'s own VMI, for a virt-launcher pod.

    Exactly what the admission webhook appends to a host twin's selector, and what
    `mismatchLabelKeys: [kubevirt.io/created-by]` becomes where the API server merges it
    (pkg/registry/core/pod/strategy.go): a NotIn on the pod's value, appended.
    """
    if selector is None or not runs_a_vm(pod):
        return selector
    uid = pod.metadata.labels[LABEL_KUBEVIRT_VMI_UID]
    own = LabelSelectorRequirement(key=LABEL_KUBEVIRT_VMI_UID, operator=NOT_IN, values=[uid])
    return _with_requirements(selector, [own])


def _with_requirements(
    selector: LabelSelector, added: list[LabelSelectorRequirement]
) -> LabelSelector:
    expressions = [*(selector.match_expressions or ()), *added]
    return LabelSelector(match_labels=selector.match_labels, match_expressions=expressions)


def _compile_term(pod: Pod, term: PodAffinityTerm, weight: int, physical: bool) -> AffinityTerm:
    namespaces = frozenset(term.namespaces or ())
    if not namespaces and term.namespace_selector is None:
        namespaces = frozenset((pod.metadata.namespace,))
    key, selector = term.topology_key, term.label_selector
    if physical and key == HOSTNAME_KEY:
        key, selector = LABEL_ESXI_HOST, without_own_vm(pod, selector)
    return AffinityTerm(
        selector=compile_label_selector(selector),
        topology_key=key,
        namespaces=namespaces,
        namespace_selector=compile_label_selector(term.namespace_selector),
        weight=weight,
        declared_key=term.topology_key,
    )


def _required_anti(pod: Pod, term: PodAffinityTerm, physical: bool) -> list[AffinityTerm]:
    """A required anti-affinity term as decided on. Read physically for a virt-launcher pod, it
    also stays on the hostname as written: its host reading leaves the VM's own pods out, and
    its node reading still keeps them apart (KubeVirt's own term keeping a migration target off
    its source's node is one such), as the webhook keeps the term beside its twin."""
    decided = _compile_term(pod, term, 0, physical)
    moved = decided.declared_key != decided.topology_key
    if not (moved and runs_a_vm(pod) and term.label_selector is not None):
        return [decided]
    return [_compile_term(pod, term, 0, False), decided]


def _required(group: PodAffinity | None) -> list[PodAffinityTerm]:
    if group is None:
        return []
    return group.required_during_scheduling_ignored_during_execution or []


def compile_pod_terms(
    pod: Pod, physical_anti_affinity: PhysicalAntiAffinity = "opt-in"
) -> PodTerms:
    """Compile a pod's affinity and anti-affinity, required and preferred.

    `physical_anti_affinity` is the shared setting: whether the pod annotation opts one pod in,
    every pod is read physically, or none.
    Equal terms (a workload's replicas) come back as one shared, immutable object.
    """
    affinity = pod.spec.affinity
    if affinity is None or (affinity.pod_affinity is None and affinity.pod_anti_affinity is None):
        return NO_TERMS
    physical = physical_opt_in(pod, physical_anti_affinity)
    together, apart = affinity.pod_affinity, affinity.pod_anti_affinity

    def preferred(group: PodAffinity | None, read_physically: bool) -> tuple[AffinityTerm, ...]:
        weighted = group.preferred_during_scheduling_ignored_during_execution if group else None
        return tuple(
            _compile_term(pod, w.pod_affinity_term, w.weight, read_physically)
            for w in weighted or ()
        )

    compiled = PodTerms(
        required_affinity=tuple(_compile_term(pod, t, 0, False) for t in _required(together)),
        required_anti=tuple(d for t in _required(apart) for d in _required_anti(pod, t, physical)),
        preferred_affinity=preferred(together, False),
        preferred_anti=preferred(apart, physical),
    )
    return _SHARED_TERMS.share(compiled, compiled)


def incoming_scope(
    term: AffinityTerm, namespace_labels: Mapping[str, Mapping[str, str]]
) -> NamespaceScope:
    """The namespaces an incoming pod's term covers.

    kube-scheduler merges the namespaces its namespaceSelector picks into the term's namespace
    set (plugin.go mergeAffinityTermNamespacesIfNotEmpty) and then matches pods with nil
    namespace labels. Observed on a real v1.36.2 (oracle README, kso-0002 and kso-0468): a
    namespaceSelector that matches an *empty* label set -- `{}`, but also one built only from
    NotIn / DoesNotExist -- then selects every namespace, not only those whose labels match. We
    reproduce that for the incoming pod's terms (required, and preferred which take the same
    path); existing pods' terms use real namespace labels (AffinityTerm.matches).
    """
    selector = term.namespace_selector
    if selector.matches({}):
        return NamespaceScope(everywhere=True)
    names = set(term.namespaces)
    if not selector.nothing:
        names.update(ns for ns, labels in namespace_labels.items() if selector.matches(labels))
    return NamespaceScope(everywhere=False, names=frozenset(names))


def incoming_matches_itself(
    pod: Pod, terms: Sequence[AffinityTerm], scopes: Sequence[NamespaceScope]
) -> bool:
    """Whether the incoming pod matches all its own required affinity terms (first-pod rule).

    Matched against the terms' merged namespace scopes, as kube-scheduler does (incoming_scope).
    """
    namespace, labels = pod.metadata.namespace, pod.metadata.labels
    return bool(terms) and all(
        namespace in scope and term.selector.matches(labels)
        for term, scope in zip(terms, scopes, strict=True)
    )


def _merge_keys(pod: Pod, term: PodAffinityTerm) -> PodAffinityTerm:
    selector = term.label_selector
    if selector is None or not (term.match_label_keys or term.mismatch_label_keys):
        return term
    labels = pod.metadata.labels
    added = [
        LabelSelectorRequirement(key=key, operator=op, values=[labels[key]])
        for keys, op in ((term.match_label_keys, IN), (term.mismatch_label_keys, NOT_IN))
        for key in keys or ()
        if key in labels
    ]
    if not added:
        return term
    return msgspec.structs.replace(term, label_selector=_with_requirements(selector, added))


def _merge_group(pod: Pod, group: PodAffinity | None) -> PodAffinity | None:
    if group is None:
        return None
    required = group.required_during_scheduling_ignored_during_execution
    preferred = group.preferred_during_scheduling_ignored_during_execution
    return PodAffinity(
        required_during_scheduling_ignored_during_execution=(
            None if required is None else [_merge_keys(pod, t) for t in required]
        ),
        preferred_during_scheduling_ignored_during_execution=(
            None
            if preferred is None
            else [
                msgspec.structs.replace(w, pod_affinity_term=_merge_keys(pod, w.pod_affinity_term))
                for w in preferred
            ]
        ),
    )


def apply_label_keys(pod: Pod) -> Pod:
    """Merge matchLabelKeys / mismatchLabelKeys into the selectors, as kube-apiserver does.

    The API server does this once, at pod creation (pkg/registry/core/pod/strategy.go), and the
    scheduler reads only the merged selector. Pods read back from the API already carry it; use
    this for a pod spec that has not been through the API server (a dry run, a test).
    """
    affinity = pod.spec.affinity
    if affinity is None:
        return pod
    merged = msgspec.structs.replace(
        affinity,
        pod_affinity=_merge_group(pod, affinity.pod_affinity),
        pod_anti_affinity=_merge_group(pod, affinity.pod_anti_affinity),
    )
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, affinity=merged))
