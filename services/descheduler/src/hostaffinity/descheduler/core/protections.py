"""DefaultEvictor: which pods may be evicted at all, with upstream's args and defaults.

Semantics of pkg/framework/plugins/defaultevictor/defaultevictor.go (v0.36): the
`descheduler.alpha.kubernetes.io/evict` annotation overrides the protections; mirror, static
and terminating pods are never evicted; by default DaemonSet pods, system-critical pods, pods
with local storage (emptyDir / hostPath) and bare pods are protected (`podProtections` or the
deprecated booleans turn them off or add PVC / no-PDB protection); `labelSelector`,
`priorityThreshold`, `minPodAge`, `minReplicas`, `namespaceLabelSelector` narrow the set;
`noEvictionPolicy: Mandatory` makes the prefer-no-eviction annotation a hard no.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

import msgspec

from hostaffinity.affinity.model import LabelSelector
from hostaffinity.affinity.selectors import compile_label_selector
from hostaffinity.descheduler.core.model import DeschedulerPod, parse_time
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.base import PREFER_NO_EVICTION

EVICT_ANNOTATION: Final = "descheduler.alpha.kubernetes.io/evict"
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
SOURCE_ANNOTATION: Final = "kubernetes.io/config.source"
# pkg/apis/scheduling/types.go: SystemCriticalPriority; the two built-in classes.
SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
KNOWN_PRIORITY_CLASSES: Final = {
    "system-cluster-critical": SYSTEM_CRITICAL_PRIORITY,
    "system-node-critical": SYSTEM_CRITICAL_PRIORITY + 1000,
}
LOCAL_STORAGE: Final = "PodsWithLocalStorage"
DAEMONSET: Final = "DaemonSetPods"
SYSTEM_CRITICAL: Final = "SystemCriticalPods"
FAILED_BARE: Final = "FailedBarePods"
WITH_PVC: Final = "PodsWithPVC"
WITHOUT_PDB: Final = "PodsWithoutPDB"
DEFAULT_PROTECTIONS: Final = (LOCAL_STORAGE, SYSTEM_CRITICAL, FAILED_BARE, DAEMONSET)
EXTRA_PROTECTIONS: Final = (WITH_PVC, WITHOUT_PDB)
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(text: str) -> float:
    """A Go duration (`90s`, `1h30m`) in seconds; ValueError otherwise."""
    if not text or _DURATION.sub("", text) != "":
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text))


class _Args(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    pass


class PriorityThreshold(_Args, frozen=True):
    value: int | None = None
    name: str = ""


class PodProtections(_Args, frozen=True):
    extra_enabled: list[str] = msgspec.field(default_factory=list)
    default_disabled: list[str] = msgspec.field(default_factory=list)


class DefaultEvictorArgs(_Args, frozen=True):
    """Upstream's DefaultEvictorArgs (pkg/framework/plugins/defaultevictor/types.go)."""

    node_selector: str = ""
    label_selector: LabelSelector | None = None
    namespace_label_selector: LabelSelector | None = None
    priority_threshold: PriorityThreshold | None = None
    # Upstream makes node fit optional; here a pod with nowhere to go is never evicted, so the
    # flag is accepted for compatibility and fit is always checked.
    node_fit: bool = True
    min_replicas: int = 0
    min_pod_age: str | None = None
    no_eviction_policy: str = "Preferred"
    pod_protections: PodProtections = msgspec.field(default_factory=PodProtections)
    evict_local_storage_pods: bool = False
    evict_daemon_set_pods: bool = False
    evict_system_critical_pods: bool = False
    ignore_pvc_pods: bool = False
    ignore_pods_without_pdb: bool = False
    evict_failed_bare_pods: bool = False

    def validate(self) -> list[str]:
        errors = []
        threshold = self.priority_threshold
        if threshold is not None and threshold.value is not None and threshold.name:
            errors.append("priorityThreshold: only one of value and name can be set")
        if (
            threshold is not None
            and threshold.name
            and threshold.name not in KNOWN_PRIORITY_CLASSES
        ):
            errors.append(
                f"priorityThreshold.name {threshold.name!r}: only "
                f"{', '.join(KNOWN_PRIORITY_CLASSES)} are known; give the value instead"
            )
        if self.min_pod_age is not None:
            try:
                parse_duration(self.min_pod_age)
            except ValueError as error:
                errors.append(f"minPodAge: {error}")
        if self.no_eviction_policy not in ("Preferred", "Mandatory"):
            errors.append(f"noEvictionPolicy {self.no_eviction_policy!r}: Preferred or Mandatory")
        for name in self.pod_protections.default_disabled:
            if name not in DEFAULT_PROTECTIONS:
                errors.append(f"podProtections.defaultDisabled: unknown protection {name!r}")
        for name in self.pod_protections.extra_enabled:
            if name not in EXTRA_PROTECTIONS:
                errors.append(f"podProtections.extraEnabled: unsupported protection {name!r}")
        try:
            parse_node_selector(self.node_selector)
        except ValueError as error:
            errors.append(f"nodeSelector: {error}")
        for field, selector in (
            ("labelSelector", self.label_selector),
            ("namespaceLabelSelector", self.namespace_label_selector),
        ):
            if selector is not None and compile_label_selector(selector).nothing:
                errors.append(f"{field} is invalid (it would select nothing)")
        return errors

    def protections(self) -> frozenset[str]:
        """The active protections (getEffectivePodProtections: new style wins when used)."""
        new = self.pod_protections
        if new.default_disabled or new.extra_enabled:
            active = {p for p in DEFAULT_PROTECTIONS if p not in new.default_disabled}
            return frozenset(active | set(new.extra_enabled))
        legacy = {
            LOCAL_STORAGE: not self.evict_local_storage_pods,
            DAEMONSET: not self.evict_daemon_set_pods,
            SYSTEM_CRITICAL: not self.evict_system_critical_pods,
            FAILED_BARE: not self.evict_failed_bare_pods,
            WITH_PVC: self.ignore_pvc_pods,
            WITHOUT_PDB: self.ignore_pods_without_pdb,
        }
        return frozenset(name for name, on in legacy.items() if on)


def parse_node_selector(text: str) -> dict[str, tuple[str, str]]:
    """An equality-based selector string (`a=b,c!=d,e`) as key -> (op, value)."""
    result: dict[str, tuple[str, str]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        for op in ("!=", "==", "="):
            if op in part:
                key, value = (s.strip() for s in part.split(op, 1))
                if not key:
                    raise ValueError(f"no key in {part!r}")
                result[key] = ("!=" if op == "!=" else "=", value)
                break
        else:
            result[part] = ("exists", "")
    return result


def node_selected(selector: dict[str, tuple[str, str]], labels: dict[str, str]) -> bool:
    for key, (op, value) in selector.items():
        if op == "exists" and key not in labels:
            return False
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
    return True


# Why a pod may not be evicted, or None; one per active protection or narrowing arg.
Constraint = Callable[[ClusterState, DeschedulerPod, datetime], str | None]


def _bare_pods(protected: bool) -> Constraint:
    """Always registered: FailedBarePods only decides whether a failed bare pod may go."""

    def constraint(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
        if pod.metadata.owner_references or not (protected or pod.status.phase != "Failed"):
            return None
        return "pod has no owner (a bare pod would not come back)"

    return constraint


def _system_critical(threshold: int | None) -> list[Constraint]:
    """System-critical priority, and the priority threshold that only applies alongside it."""

    def critical(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
        priority = pod.spec.priority
        if priority is not None and priority >= SYSTEM_CRITICAL_PRIORITY:
            return "pod has system-critical priority"
        return None

    def above(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
        priority = pod.spec.priority
        if threshold is not None and priority is not None and priority >= threshold:
            return f"pod priority {priority} is at or above the threshold {threshold}"
        return None

    return [critical] if threshold is None else [critical, above]


def _local_storage(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
    if any(v.empty_dir is not None or v.host_path is not None for v in pod.spec.volumes):
        return "pod has local storage (emptyDir or hostPath)"
    return None


def _daemonset(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
    if any(r.kind == "DaemonSet" for r in pod.metadata.owner_references):
        return "pod belongs to a DaemonSet"
    return None


def _with_pvc(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
    if any(v.persistent_volume_claim is not None for v in pod.spec.volumes):
        return "pod uses a PersistentVolumeClaim"
    return None


def _without_pdb(state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
    return None if _covered_by_pdb(state, pod) else "pod has no PodDisruptionBudget"


class Protections:
    """One profile's DefaultEvictor, compiled once into a list of constraints.

    As upstream's New() does (kubernetes-sigs/descheduler,
    pkg/framework/plugins/defaultevictor/defaultevictor.go: addAllConstraints and the
    apply*Protection functions), each active protection and each narrowing arg registers its own
    constraint when the profile is loaded; a pod is refused by the first constraint that says no.
    """

    def __init__(self, args: DefaultEvictorArgs) -> None:
        self.args = args
        self.active = args.protections()
        self.node_selector = parse_node_selector(args.node_selector)
        self._constraints = [*self._protection_constraints(), *self._scope_constraints()]

    def _protection_constraints(self) -> list[Constraint]:
        """The pod protections, in upstream's order of registration."""
        active = self.active
        constraints = [_bare_pods(FAILED_BARE in active)]
        if SYSTEM_CRITICAL in active:
            constraints += _system_critical(_threshold(self.args.priority_threshold))
        optional: tuple[tuple[str, Constraint], ...] = (
            (LOCAL_STORAGE, _local_storage),
            (DAEMONSET, _daemonset),
            (WITH_PVC, _with_pvc),
            (WITHOUT_PDB, _without_pdb),
        )
        constraints += [constraint for name, constraint in optional if name in active]
        return constraints

    def _scope_constraints(self) -> list[Constraint]:
        """labelSelector, namespaceLabelSelector, minPodAge and minReplicas, when set."""
        args = self.args
        constraints: list[Constraint] = []
        if args.label_selector is not None:
            labels = compile_label_selector(args.label_selector)

            def in_labels(_state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
                if labels.matches(pod.metadata.labels):
                    return None
                return "pod is outside the evictor's labelSelector"

            constraints.append(in_labels)
        selector = args.namespace_label_selector
        if selector is not None and selector.match_labels:
            namespaces = compile_label_selector(selector)

            def in_namespaces(
                state: ClusterState, pod: DeschedulerPod, _now: datetime
            ) -> str | None:
                if namespaces.matches(state.index.namespaces.get(pod.metadata.namespace, {})):
                    return None
                return "pod's namespace is outside the namespaceLabelSelector"

            constraints.append(in_namespaces)
        if args.min_pod_age is not None:
            min_age = timedelta(seconds=parse_duration(args.min_pod_age))

            def old_enough(_state: ClusterState, pod: DeschedulerPod, now: datetime) -> str | None:
                created = parse_time(pod.metadata.creation_timestamp)
                if created is not None and now - created >= min_age:
                    return None
                return f"pod is younger than minPodAge {args.min_pod_age}"

            constraints.append(old_enough)
        minimum = args.min_replicas
        if minimum > 1:

            def replicated(state: ClusterState, pod: DeschedulerPod, _now: datetime) -> str | None:
                if len(state.workloads.get(state.workload_of(pod), ())) >= minimum:
                    return None
                return f"pod's owner has fewer than minReplicas {minimum} pods"

            constraints.append(replicated)
        return constraints

    def refuse(self, state: ClusterState, pod: DeschedulerPod, now: datetime) -> str | None:
        """None when the pod may be evicted, else why not (the first reason found)."""
        meta = pod.metadata
        if meta.deletion_timestamp:
            return "pod is terminating"
        annotations = meta.annotations
        if EVICT_ANNOTATION in annotations:
            return None
        if self.args.no_eviction_policy == "Mandatory" and PREFER_NO_EVICTION in annotations:
            return "pod has the prefer-no-eviction annotation and the policy is Mandatory"
        if MIRROR_ANNOTATION in annotations:
            return "pod is a mirror pod"
        if annotations.get(SOURCE_ANNOTATION, "api") != "api":
            return "pod is a static pod"
        return next(filter(None, (c(state, pod, now) for c in self._constraints)), None)


def _threshold(threshold: PriorityThreshold | None) -> int | None:
    """priorityThreshold as a number (a known class name resolved), or None when unset."""
    if threshold is None:
        return None
    return (
        threshold.value
        if threshold.value is not None
        else KNOWN_PRIORITY_CLASSES.get(threshold.name)
    )


def _covered_by_pdb(state: ClusterState, pod: DeschedulerPod) -> bool:
    for pdb in state.pdbs.values():
        if pdb.metadata.namespace != pod.metadata.namespace or pdb.spec.selector is None:
            continue
        if compile_label_selector(pdb.spec.selector).matches(pod.metadata.labels):
            return True
    return False
