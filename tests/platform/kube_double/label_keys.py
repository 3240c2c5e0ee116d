"""matchLabelKeys and mismatchLabelKeys of pod (anti-)affinity on pod create, after mutating
admission, as kube-apiserver's pod strategy treats them (KEP-3633: alpha in v1.29, beta and on by
default from v1.31, GA in v1.33; feature gate MatchLabelKeysInPodAffinity).

Where the gate is on (`merges=True`, the double's default: v1.31+), every term with a
labelSelector gets `key In [value]` for each matchLabelKeys key and `key NotIn [value]` for each
mismatchLabelKeys key the pod's labels carry, appended to its matchExpressions; the key lists are
kept (kubernetes pkg/registry/core/pod/strategy.go, PrepareForCreate -> mutatePodAffinity ->
applyMatchLabelKeysAndMismatchLabelKeys; the recorded v1.36.2 create in
tests/fixtures/kube-apiserver-admission/pod-create-review.json, `stored_pod`, shows it on a
webhook's twin too). Where it is off (`merges=False`: v1.29 and v1.30 by default) both lists are
dropped from every term of a new pod and nothing is merged (pkg/api/pod/util.go,
dropDisabledMatchLabelKeysFieldInPodAffinity); a v1.28 server does not know the fields and drops
them too. The selector kube-scheduler then reads is the one written, so a term relying on the
server's merge selects what its labelSelector alone selects.
"""

from __future__ import annotations

from typing import Any

GROUPS = ("podAffinity", "podAntiAffinity")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def prepare_pod_affinity(pod: dict[str, Any], *, merges: bool) -> None:
    """Merge (or drop) the label keys of every pod affinity term of `pod`, in place."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for group in GROUPS:
        terms = affinity.get(group) or {}
        found = list(terms.get(REQUIRED) or [])
        found += [w.get("podAffinityTerm") or {} for w in terms.get(PREFERRED) or []]
        for term in found:
            if merges:
                _merge(term, labels)
            else:
                term.pop("matchLabelKeys", None)
                term.pop("mismatchLabelKeys", None)


def _merge(term: dict[str, Any], labels: dict[str, str]) -> None:
    selector = term.get("labelSelector")
    if selector is None:
        return  # a null selector matches nothing: nothing to narrow
    added = [
        {"key": key, "operator": operator, "values": [labels[key]]}
        for field, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
        for key in term.get(field) or ()
        if key in labels
    ]
    if added:
        selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *added]
