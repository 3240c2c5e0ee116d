"""KubeVirt's virt-launcher pods as virt-controller renders them, and pods as the API server
stores them after the admission webhook's patch.

The launcher's labels are the VMI's plus KubeVirt's own (kubevirt/kubevirt
pkg/virt-controller/services/template.go: `kubevirt.io: virt-launcher`, `kubevirt.io/created-by`
= the VMI's uid); a migration target is rendered the same way from the same VMI and gets, on top,
the `kubevirt.io/migrationJobUID` label and a hostname anti-affinity term on its own VMI's uid,
so it never lands on its source's node (pkg/virt-controller/watch/migration.go createTargetPod).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import msgspec

from hostaffinity.admission_webhook.core.mutation import MutationSettings, plan_pod
from hostaffinity.affinity.interpod import apply_label_keys
from hostaffinity.affinity.model import Pod
from hostaffinity.schema.names import POD_PHYSICAL_ANTI_AFFINITY

HOSTNAME_KEY = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"
CREATED_BY_LABEL = "kubevirt.io/created-by"


def vmi_uid(vmi: str) -> str:
    return f"uid-vmi-{vmi}"


def launcher_pod_json(
    vmi: str,
    node: str,
    vmi_labels: Mapping[str, str],
    affinity: Mapping[str, Any],
    *,
    migration: str | None = None,
    namespace: str = "default",
    spreads: Sequence[Mapping[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The virt-launcher pod of `vmi` (opted in to the physical reading through the VMI's
    annotation, plus `annotations`), with the VMI's topology spread constraints `spreads`, or
    with `migration` the target pod of that migration (not yet scheduled)."""
    uid = vmi_uid(vmi)
    labels = {**vmi_labels, "kubevirt.io": "virt-launcher", CREATED_BY_LABEL: uid}
    rules = copy.deepcopy(dict(affinity))
    name = f"virt-launcher-{vmi}-source"
    if migration is not None:
        labels[MIGRATION_JOB_LABEL] = f"uid-{migration}"
        own_node = {"labelSelector": {"matchLabels": {CREATED_BY_LABEL: uid}},
                    "topologyKey": HOSTNAME_KEY}  # fmt: skip
        rules.setdefault("podAntiAffinity", {}).setdefault(REQUIRED, []).append(own_node)
        name, node = f"virt-launcher-{vmi}-target", ""
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": vmi,
             "uid": uid, "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-pod-{name}", "labels": labels,
                "annotations": {POD_PHYSICAL_ANTI_AFFINITY: "true", **(annotations or {})},
                "ownerReferences": [owner],
                "creationTimestamp": "2026-11-22T11:00:00Z"}  # fmt: skip
    compute = {"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.6.0",
               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}  # fmt: skip
    spec = {"nodeName": node, "affinity": rules, "containers": [compute]}
    if spreads:
        spec["topologySpreadConstraints"] = copy.deepcopy(list(spreads))
    status = {"phase": "Running" if node else "Pending"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def stored_after_admission(
    pod: Mapping[str, Any], settings: MutationSettings | None = None
) -> dict[str, Any]:
    """The pod as the API server stores it: the webhook's patch applied, then matchLabelKeys /
    mismatchLabelKeys merged into the selectors (after mutating admission)."""
    patched: dict[str, Any] = jsonpatch.apply_patch(
        copy.deepcopy(dict(pod)), plan_pod(pod, settings or MutationSettings()).operations
    )
    merged = apply_label_keys(msgspec.convert(patched, Pod))
    return {**patched, "spec": {**patched["spec"], "affinity": msgspec.to_builtins(
        merged.spec.affinity)}}  # fmt: skip


def as_kube_scheduler_reads(stored: Mapping[str, Any]) -> Pod:
    """A stored pod as kube-scheduler reads it: it knows nothing of our opt-in annotation."""
    pod = copy.deepcopy(dict(stored))
    pod["metadata"]["annotations"].pop(POD_PHYSICAL_ANTI_AFFINITY, None)
    return msgspec.convert(pod, Pod)
