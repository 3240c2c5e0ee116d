"""The admission mutation: physical intent turned into native host-key terms, as JSONPatch.

A pure planner: pod JSON in, RFC 6902 operations and admission warnings out. kube-scheduler then
enforces the host-key terms itself (ARCHITECTURE.md "Services"), so the pod needs nothing from
us once admitted. For a pod that opts in (the annotation, or the cluster-wide setting):

- each required `kubernetes.io/hostname` anti-affinity term gets a twin on the ESXi-host key,
  every other field copied as written -- `matchLabelKeys` too, since the API server merges them
  into the selector only *after* mutating admission, twins included (fixture
  kube-apiserver-admission/pod-create-review.json, notes);
- each preferred hostname anti-affinity term is *replaced* by the same term on the host key,
  same weight. A second term with the same weight would double the term's weight in scoring,
  and a weight (an integer in 1..100) cannot always be split in two. The replacement scores
  exactly as the engine's physical reading of the term (interpod.py): a host shared by two
  replicas is what the user meant to avoid, whether they share a VM or not;
- with `fail_unplaced` (shared `unknown_placement: fail`), a pod that ends up with a
  required host-key term also requires the host label to exist, appended to every
  nodeSelectorTerm (they are ORed), so an unlabelled node cannot take it: kube-scheduler lets a
  node without the topology key pass anti-affinity;
- each `kubernetes.io/hostname` topology spread constraint is *moved* to the host key, its
  `whenUnsatisfiable` kept (DoNotSchedule stays a filter, ScheduleAnyway a score), scoped to the
  pod's revision as the spread annotation is (the revision label added to `matchLabelKeys`
  when the pod carries one and the constraint can take it). Moved, not twinned: a hostname
  spread kept beside its host reading is a stronger rule than the physical one, and a DoNotSchedule
  pair can leave replicas Pending where the host spread alone places them (3 hosts, one with 3
  VMs and two with 1: the 5th replica of a maxSkew 1 pair has no node left), and a ScheduleAnyway
  pair would count the skew twice. The moved constraint is what the engine's physical reading
  (topology_spread.py) decides. The API server refuses two constraints with the same
  `topologyKey` and `whenUnsatisfiable` (pkg/apis/core/validation/validation.go,
  ValidateSpreadConstraintNotRepeat), so a hostname constraint whose kind the pod already
  spreads over hosts with stays as written;
- the spread annotation (value: maxSkew) adds a topology spread over hosts, scoped to the pod's
  own revision through `matchLabelKeys`, unless the pod already spreads over hosts (moved or
  written).

A KubeVirt migration target never conflicts with its own source. virt-controller renders the
target virt-launcher pod from the same VMI, with the same labels, while the source pod still
runs; natively the source only takes its own node out (KubeVirt even adds a hostname term on the
VMI's uid for that). Read on the host key, the same term would take the source's whole ESXi host
out, and with as many replicas as usable hosts the migration -- and a drain -- would find no
node. So every host-key term we write for a virt-launcher pod (a required twin, a preferred term
moved to the host key) gets the requirement `kubevirt.io/created-by NotIn [<this VMI's uid>]` in
its labelSelector: the label holds the VMI's uid on the source and every target alike
(template.go podLabels) and differs between any two VMs, so kube-scheduler reads a selector that
leaves the VM's own pods out, in both directions: the target's twin does not count the source,
and the source's twin does not select the target. The engine's physical reading does the same
(interpod.without_own_vm). The requirement is written out, not left to
`mismatchLabelKeys: [kubevirt.io/created-by]`, which says the same but only once the API server
merges it into the selector: it does so from v1.31 (KEP-3633's MatchLabelKeysInPodAffinity,
alpha and off in v1.29 and v1.30, which drop the field from a new pod; v1.28 does not know it),
so on those servers the twin would count the source and a drain with replicas = hosts would
deadlock. The written requirement is what v1.31+ would have merged, the same on every version. A
pod without that label, a term with no labelSelector (it selects nothing), one that already
carries the requirement, or one with `matchLabelKeys` on the VMI's identity (it selects only its
own VM) is left as it is; the hostname term itself is never touched.

Topology spreads have no mismatchLabelKeys, and a spread's selector also decides whether the
pod counts itself (podtopologyspread/filtering.go: selfMatchNum is 1 only when the pod's own
labels match). So only a migration *target* (KubeVirt labels it `kubevirt.io/migrationJobUID`,
the source never) gets, on each host-key spread we write (moved or added), the requirement
`kubevirt.io/created-by NotIn [<its VMI's uid>]`: its source is then not counted, nor is the
target itself, and a host passes when its replicas other than this VM are at most the fewest
elsewhere plus maxSkew. Placed back on its own host the VM restores the spread it had, so the
host of a source above the minimum stays open (counting the source, the target could not return
to it); elsewhere the check is one looser than a new replica's, which is as close as a label
selector gets: it cannot count the source out and the target in. A first start keeps the exact
check. The engine's physical reading does the same (topology_spread.compile_constraint).

Everything is idempotent under reinvocation: a twin, a host requirement or a spread that is
already there is not added again, and a moved spread is no longer on the hostname key. Nothing
else in the pod changes.

KubeVirt: virt-controller copies a VMI's `spec.affinity`, `spec.topologySpreadConstraints`,
labels and (all but kubectl's and its own bookkeeping) annotations onto the virt-launcher pod
it renders, for the first start and for every migration target alike
(kubevirt/kubevirt pkg/virt-controller/services/template.go: renderLaunchManifest,
filterVMIAnnotationsForPod, podLabels). The pod is where the terms take effect, so the
virt-launcher pod is mutated here like any pod, and the VMI is left as its owner wrote it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from hostaffinity.admission_webhook.config import WebhookSettings
from hostaffinity.affinity.interpod import PhysicalAntiAffinity, reads_physically
from hostaffinity.runtime.process.config import SharedSettings
from hostaffinity.schema.names import (
    LABEL_ESXI_HOST,
    LABEL_KUBEVIRT_MIGRATION_JOB,
    LABEL_KUBEVIRT_VMI_UID,
    POD_SPREAD_ACROSS_HOSTS,
)

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
ANTI_AFFINITY_PATH: Final = "/spec/affinity/podAntiAffinity"
HOST_LABEL_EXISTS: Final = {"key": LABEL_ESXI_HOST, "operator": "Exists"}

# Labels naming a pod's revision, by controller: ReplicaSet, StatefulSet (and DaemonSet),
# VirtualMachinePool. The first one the pod carries scopes its spread to its own revision.
REVISION_LABELS: Final = ("pod-template-hash", "controller-revision-hash",
                          "kubevirt.io/vm-pool-revision-name")  # fmt: skip
# Labels that name one pod, never a group of replicas: left out of a spread's selector.
PER_POD_LABELS: Final = frozenset({
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/job-completion-index",
})  # fmt: skip
# virt-controller labels each virt-launcher pod with its VMI's identity (created-by uid, VM
# name, VMI id: template.go podLabels); every key under a *kubevirt.io prefix is left out.
KUBEVIRT_LABEL_SUFFIX: Final = "kubevirt.io"

# topologySpreadConstraints[].maxSkew is an int32: a larger one would fail validation after our
# patch and so refuse the pod, which the webhook must never cause.
MAX_SKEW_LIMIT: Final = 2**31 - 1

Operation = dict[str, Any]
WhenUnsatisfiable = Literal["ScheduleAnyway", "DoNotSchedule"]
# Where a caller names none (tests), the config's own defaults.
_SHARED = SharedSettings()
_WEBHOOK = WebhookSettings()


class Outcome(enum.Enum):
    """What a review came to; the metric's `outcome` label."""

    PATCHED = "patched"
    UNCHANGED = "unchanged"
    WARNED = "warned"
    REFUSED = "refused"


@dataclass(frozen=True)
class MutationSettings:
    """What the shared config and the webhook section decide about the mutation."""

    # The shared `physical_anti_affinity`, by its name and values.
    physical_anti_affinity: PhysicalAntiAffinity = _SHARED.physical_anti_affinity
    # The shared `unknown_placement: fail`, by the engine's name for it.
    fail_unplaced: bool = _SHARED.fails_unplaced
    spread_when_unsatisfiable: WhenUnsatisfiable = _WEBHOOK.spread_when_unsatisfiable


@dataclass(frozen=True)
class Mutation:
    """The JSONPatch for one pod and the warnings for whoever created it."""

    operations: list[Operation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    twins: int = 0
    host_label_required: bool = False
    spread_added: bool = False
    spreads_moved: int = 0

    @property
    def outcome(self) -> Outcome:
        if self.warnings:
            return Outcome.WARNED
        return Outcome.PATCHED if self.operations else Outcome.UNCHANGED


class UninterpretablePod(ValueError):
    """The pod's fields have shapes the API would not have produced: admit it untouched."""


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UninterpretablePod(f"{where} is not an object")
    return value


def _sequence(value: object, where: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise UninterpretablePod(f"{where} is not a list")
    return value


def opted_in(annotations: Mapping[str, Any], settings: MutationSettings) -> bool:
    """Whether the pod's hostname anti-affinity is read physically (the engine's own rule)."""
    return reads_physically(settings.physical_anti_affinity, annotations)


def own_vm_requirement(labels: Mapping[str, Any]) -> dict[str, Any]:
    """`kubevirt.io/created-by NotIn [<this VMI's uid>]`: what leaves the pod's own VM out."""
    return {"key": LABEL_KUBEVIRT_VMI_UID, "operator": "NotIn",
            "values": [labels[LABEL_KUBEVIRT_VMI_UID]]}  # fmt: skip


def own_vm_excluded(term: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """Whether a host-key term of this pod must leave out its own VM's pods: a virt-launcher
    pod's term with a selector that does not already do so, nor select only its own VM
    (`matchLabelKeys` on the VMI's identity). See the module docstring."""
    selector = term.get("labelSelector")
    if LABEL_KUBEVIRT_VMI_UID not in labels or selector is None:
        return False
    if LABEL_KUBEVIRT_VMI_UID in _sequence(term.get("matchLabelKeys"), "matchLabelKeys"):
        return False
    expressions = _sequence(_mapping(selector, "labelSelector").get("matchExpressions"),
                            "matchExpressions")  # fmt: skip
    return own_vm_requirement(labels) not in expressions


def host_twin(term: Mapping[str, Any], labels: Mapping[str, Any]) -> dict[str, Any]:
    """The same pod (anti-)affinity term on the ESXi-host key, every other field as written,
    leaving out the pod's own VM (a virt-launcher pod's source or target)."""
    twin = {**term, "topologyKey": LABEL_ESXI_HOST}
    if own_vm_excluded(twin, labels):
        selector = _mapping(term["labelSelector"], "labelSelector")
        expressions = _sequence(selector.get("matchExpressions"), "matchExpressions")
        twin["labelSelector"] = {
            **selector,
            "matchExpressions": [*expressions, own_vm_requirement(labels)],
        }
    return twin


def _own_vm_operation(path: str, term: Mapping[str, Any], labels: Mapping[str, Any]) -> Operation:
    """Append the own-VM requirement to the selector of the term at `path`."""
    path = f"{path}/labelSelector/matchExpressions"
    if "matchExpressions" in _mapping(term["labelSelector"], "labelSelector"):
        return {"op": "add", "path": f"{path}/-", "value": own_vm_requirement(labels)}
    return {"op": "add", "path": path, "value": [own_vm_requirement(labels)]}


def _twin_operations(anti: Mapping[str, Any], labels: Mapping[str, Any]) -> list[Operation]:
    """A twin for each required hostname term that has none yet (a twin: a host-key term equal
    to host_twin of it); each preferred hostname term moved to the host key."""
    operations: list[Operation] = []
    required = [
        _mapping(term, f"podAntiAffinity.{REQUIRED}[{position}]")
        for position, term in enumerate(
            _sequence(anti.get(REQUIRED), f"podAntiAffinity.{REQUIRED}")
        )
    ]
    host_terms = [t for t in required if t.get("topologyKey") == LABEL_ESXI_HOST]
    for term in required:
        if term.get("topologyKey") == HOSTNAME_KEY and host_twin(term, labels) not in host_terms:
            path = f"{ANTI_AFFINITY_PATH}/{REQUIRED}/-"
            operations.append({"op": "add", "path": path, "value": host_twin(term, labels)})
    preferred = _sequence(anti.get(PREFERRED), f"podAntiAffinity.{PREFERRED}")
    for position, weighted in enumerate(preferred):
        where = f"podAntiAffinity.{PREFERRED}[{position}]"
        inner = _mapping(weighted, where).get("podAffinityTerm")
        term = _mapping(inner, f"{where}.podAffinityTerm")
        if term.get("topologyKey") == HOSTNAME_KEY:
            path = f"{ANTI_AFFINITY_PATH}/{PREFERRED}/{position}/podAffinityTerm"
            operations.append({"op": "replace", "path": f"{path}/topologyKey",
                               "value": LABEL_ESXI_HOST})  # fmt: skip
            if own_vm_excluded(term, labels):
                operations.append(_own_vm_operation(path, term, labels))
    return operations


def _has_required_host_term(affinity: Mapping[str, Any], twins_added: bool) -> bool:
    if twins_added:
        return True
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = _sequence(_mapping(affinity.get(kind), kind).get(REQUIRED), f"{kind}.{REQUIRED}")
        if any(_mapping(t, kind).get("topologyKey") == LABEL_ESXI_HOST for t in terms):
            return True
    return False


def _requires_host_label(expression: Mapping[str, Any]) -> bool:
    return expression.get("key") == LABEL_ESXI_HOST and expression.get("operator") == "Exists"


def _host_label_operations(affinity: Mapping[str, Any]) -> list[Operation]:
    """Require the host label on every node the pod may take (node affinity terms are ORed)."""
    base = "/spec/affinity/nodeAffinity"
    node_affinity = _mapping(affinity.get("nodeAffinity"), "nodeAffinity")
    only_term = {"nodeSelectorTerms": [{"matchExpressions": [HOST_LABEL_EXISTS]}]}
    if not node_affinity:
        return [{"op": "add", "path": base, "value": {REQUIRED: only_term}}]
    selector = _mapping(node_affinity.get(REQUIRED), f"nodeAffinity.{REQUIRED}")
    if not selector:
        return [{"op": "add", "path": f"{base}/{REQUIRED}", "value": only_term}]
    operations: list[Operation] = []
    terms = _sequence(selector.get("nodeSelectorTerms"), "nodeSelectorTerms")
    for position, term in enumerate(terms):
        path = f"{base}/{REQUIRED}/nodeSelectorTerms/{position}/matchExpressions"
        expressions = _sequence(
            _mapping(term, "nodeSelectorTerm").get("matchExpressions"), "matchExpressions"
        )
        if any(_requires_host_label(_mapping(e, "matchExpression")) for e in expressions):
            continue
        if "matchExpressions" in term:
            operations.append({"op": "add", "path": f"{path}/-", "value": HOST_LABEL_EXISTS})
        else:
            operations.append({"op": "add", "path": path, "value": [HOST_LABEL_EXISTS]})
    return operations


def revision_label(labels: Mapping[str, str]) -> str | None:
    """The label that names the pod's revision, if its controller sets one."""
    return next((key for key in REVISION_LABELS if key in labels), None)


def _group_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The pod's labels that its replicas share: no revision, no per-pod identity."""
    return {
        key: value
        for key, value in labels.items()
        if key not in REVISION_LABELS
        and key not in PER_POD_LABELS
        and not key.partition("/")[0].endswith(KUBEVIRT_LABEL_SUFFIX)
    }


def spread_constraint(
    max_skew: int, labels: Mapping[str, str], when: WhenUnsatisfiable
) -> dict[str, Any]:
    """A topology spread over ESXi hosts among the pod's own replicas of its own revision."""
    constraint: dict[str, Any] = {
        "maxSkew": max_skew,
        "topologyKey": LABEL_ESXI_HOST,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": _group_labels(labels)},
    }
    revision = revision_label(labels)
    if revision is not None:
        constraint["matchLabelKeys"] = [revision]
    return constraint


def _max_skew(value: object) -> int:
    """The annotation as a maxSkew the API server will accept (an int32 >= 1)."""
    whole = isinstance(value, str) and value.isascii() and value.isdigit()
    if whole and 1 <= int(str(value)) <= MAX_SKEW_LIMIT:
        return int(str(value))
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise UninterpretablePod(
        f"annotation {POD_SPREAD_ACROSS_HOSTS} must be a whole number from 1 to {MAX_SKEW_LIMIT} "
        f"(the maxSkew), not {shown}"
    )


def _revision_scoped(constraint: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """The constraint with the pod's revision label in `matchLabelKeys`, where that is valid:
    with a labelSelector, and no key written twice (validation.go refuses a matchLabelKeys key
    that the labelSelector already names)."""
    revision = revision_label(labels)
    keys = list(_sequence(constraint.get("matchLabelKeys"), "matchLabelKeys"))
    selector = _mapping(constraint.get("labelSelector"), "labelSelector")
    named: set[object] = set(_mapping(selector.get("matchLabels"), "matchLabels"))
    named |= {
        _mapping(e, "matchExpression").get("key")
        for e in _sequence(selector.get("matchExpressions"), "matchExpressions")
    }
    if revision is None or not selector or revision in {*keys, *named}:
        return dict(constraint)
    return {**constraint, "matchLabelKeys": [*keys, revision]}


def without_own_vm_spread(
    constraint: Mapping[str, Any], labels: Mapping[str, Any]
) -> dict[str, Any]:
    """A migration target's host-key spread with its own VM left out of the selector (see the
    module docstring); any other pod's, or one with no selector or already keyed on the VMI's
    identity, as it is."""
    target = LABEL_KUBEVIRT_VMI_UID in labels and LABEL_KUBEVIRT_MIGRATION_JOB in labels
    keys = _sequence(constraint.get("matchLabelKeys"), "matchLabelKeys")
    written = constraint.get("labelSelector")
    if not target or written is None or LABEL_KUBEVIRT_VMI_UID in keys:
        return dict(constraint)
    selector = _mapping(written, "labelSelector")
    expressions = _sequence(selector.get("matchExpressions"), "matchExpressions")
    own = own_vm_requirement(labels)
    return {**constraint, "labelSelector": {**selector, "matchExpressions": [*expressions, own]}}


def _moved_spread_operations(
    constraints: Sequence[Mapping[str, Any]], labels: Mapping[str, str]
) -> list[Operation]:
    """Each hostname spread replaced by its host-key reading, unless the pod already spreads
    over hosts with the same whenUnsatisfiable (that pair would fail validation)."""
    taken = {
        c.get("whenUnsatisfiable") for c in constraints if c.get("topologyKey") == LABEL_ESXI_HOST
    }
    operations: list[Operation] = []
    for position, constraint in enumerate(constraints):
        when = constraint.get("whenUnsatisfiable")
        if constraint.get("topologyKey") != HOSTNAME_KEY or when in taken:
            continue
        taken.add(when)
        moved = _revision_scoped(constraint, labels) | {"topologyKey": LABEL_ESXI_HOST}
        moved = without_own_vm_spread(moved, labels)
        path = f"/spec/topologySpreadConstraints/{position}"
        operations.append({"op": "replace", "path": path, "value": moved})
    return operations


def _annotated_spread_operations(
    spec: Mapping[str, Any],
    constraints: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str],
    max_skew: int,
    when: WhenUnsatisfiable,
) -> list[Operation]:
    if any(c.get("topologyKey") == LABEL_ESXI_HOST for c in constraints):
        return []
    constraint = spread_constraint(max_skew, labels, when)
    if not constraint["labelSelector"]["matchLabels"]:
        raise UninterpretablePod(
            "the pod has no labels its replicas share, so a spread over hosts cannot select them"
        )
    constraint = without_own_vm_spread(constraint, labels)
    if "topologySpreadConstraints" in spec:
        return [{"op": "add", "path": "/spec/topologySpreadConstraints/-", "value": constraint}]
    return [{"op": "add", "path": "/spec/topologySpreadConstraints", "value": [constraint]}]


def plan_pod(pod: Mapping[str, Any], settings: MutationSettings) -> Mutation:
    """The patch that gives an opted-in pod its host-key terms; no patch for any other pod."""
    try:
        return _plan(_mapping(pod, "the object"), settings)
    except UninterpretablePod as why:
        return Mutation(warnings=[f"hostaffinity: pod admitted without host-aware terms: {why}"])


def _plan(pod: Mapping[str, Any], settings: MutationSettings) -> Mutation:
    metadata = _mapping(pod.get("metadata"), "metadata")
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations")
    labels = _mapping(metadata.get("labels"), "metadata.labels")
    spec = _mapping(pod.get("spec"), "spec")
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    constraints = [
        _mapping(c, f"topologySpreadConstraints[{position}]")
        for position, c in enumerate(
            _sequence(spec.get("topologySpreadConstraints"), "topologySpreadConstraints")
        )
    ]
    twins: list[Operation] = []
    host_label: list[Operation] = []
    moved: list[Operation] = []
    spread: list[Operation] = []
    if opted_in(annotations, settings):
        anti = _mapping(affinity.get("podAntiAffinity"), "podAntiAffinity")
        twins = _twin_operations(anti, labels)
        required_twin = any(op["path"] == f"{ANTI_AFFINITY_PATH}/{REQUIRED}/-" for op in twins)
        if settings.fail_unplaced and _has_required_host_term(affinity, required_twin):
            host_label = _host_label_operations(affinity)
        moved = _moved_spread_operations(constraints, labels)
    if POD_SPREAD_ACROSS_HOSTS in annotations:
        max_skew = _max_skew(annotations[POD_SPREAD_ACROSS_HOSTS])
        when = settings.spread_when_unsatisfiable
        after_move = [*constraints, *(op["value"] for op in moved)]
        spread = _annotated_spread_operations(spec, after_move, labels, max_skew, when)
    return Mutation(
        operations=[*twins, *host_label, *moved, *spread],
        twins=sum("/labelSelector/" not in op["path"] for op in twins),
        host_label_required=bool(host_label),
        spread_added=bool(spread),
        spreads_moved=len(moved),
    )
