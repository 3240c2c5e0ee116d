"""Golden admission cases: the pod kube-apiserver sends, and the pod it must store after our patch.

The Deployment pod is the body a real kube-apiserver v1.36.2 sent (shared fixture
kube-apiserver-admission/pod-create-review.json); the others are written in the same shape.
Each expected pod is written out by hand as a change to the input, so a reader can check it
against the rules in admission.py without running anything. The README's table of webhook and
admission-policy outputs is about these same cases.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch

from hostaffinity.admission_webhook.core.admission_v1 import (
    decode_review,
    encode_answer,
    mutation_for,
)
from hostaffinity.admission_webhook.core.mutation import MutationSettings
from hostaffinity.schema.names import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    POD_SPREAD_ACROSS_HOSTS,
)
from tests.recorded_fixtures import fixture_dir

FIXTURE = fixture_dir("kube-apiserver-admission") / "pod-create-review.json"
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
HOST_EXISTS = {"key": LABEL_ESXI_HOST, "operator": "Exists"}


def recorded_reviews() -> list[dict[str, Any]]:
    """The reviews the real API server sent (a missing fixture fails loudly)."""
    reviews: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["reviews"]
    return reviews


def review(pod: dict[str, Any], uid: str = "00000000-0000-4000-8000-000000000001") -> bytes:
    """An AdmissionReview for a pod CREATE, in the recorded wire shape."""
    body = copy.deepcopy(recorded_reviews()[0]["request_body"])
    body["request"]["uid"] = uid
    body["request"]["namespace"] = pod["metadata"].get("namespace", "apps")
    body["request"]["object"] = pod
    return json.dumps(body).encode()


def answer(body: bytes, settings: MutationSettings | None = None) -> dict[str, Any]:
    """The webhook's AdmissionReview answer to `body`, as it goes back on the wire."""
    parsed = decode_review(body)
    mutation = mutation_for(parsed, settings or MutationSettings())
    reply: dict[str, Any] = json.loads(encode_answer(parsed, mutation))
    return reply


def admitted(pod: dict[str, Any], settings: MutationSettings | None = None) -> dict[str, Any]:
    """The pod as the API server would store it after the webhook's answer."""
    response = answer(review(pod), settings)["response"]
    assert response["allowed"] is True
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(pod, operations)
    return result


def _pod(
    labels: dict[str, str], annotations: dict[str, str], spec: dict[str, Any], **meta: Any
) -> dict[str, Any]:
    metadata = {"namespace": "apps", "labels": labels, "annotations": annotations, **meta}
    base_spec = {"containers": [{"name": "main", "image": "registry.example/app:1"}]}
    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": base_spec | spec}
    # As decoded from the wire: no object shared by two places (a selector built once and used
    # in two terms would take a patch meant for one of them in both).
    decoded: dict[str, Any] = json.loads(json.dumps(pod))
    return decoded


def deployment() -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded Deployment pod: required + preferred hostname terms, matchLabelKeys."""
    pod = recorded_reviews()[0]["request_body"]["request"]["object"]
    expected = copy.deepcopy(pod)
    anti = expected["spec"]["affinity"]["podAntiAffinity"]
    anti[REQUIRED].append(
        {
            "labelSelector": {"matchLabels": {"app": "web"}},
            "topologyKey": LABEL_ESXI_HOST,
            "matchLabelKeys": ["pod-template-hash"],
        }
    )
    anti[PREFERRED][0]["podAffinityTerm"]["topologyKey"] = LABEL_ESXI_HOST
    expected["spec"]["affinity"]["nodeAffinity"] = {
        REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [HOST_EXISTS]}]}
    }
    return pod, expected


def statefulset() -> tuple[dict[str, Any], dict[str, Any]]:
    """A StatefulSet pod with the spread opt-in and node affinity of its own (two ORed terms)."""
    labels = {
        "app": "db",
        "controller-revision-hash": "db-6d4b9c7f8",
        "statefulset.kubernetes.io/pod-name": "db-2",
        "apps.kubernetes.io/pod-index": "2",
    }
    term = {
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
        "topologyKey": HOSTNAME,
        "namespaces": ["apps", "apps-replica"],
    }
    node_affinity = {
        REQUIRED: {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]},
            ]
        }
    }
    pod = _pod(
        labels,
        {POD_PHYSICAL_ANTI_AFFINITY: "true", POD_SPREAD_ACROSS_HOSTS: "1"},
        {"affinity": {"nodeAffinity": node_affinity, "podAntiAffinity": {REQUIRED: [term]}}},
        name="db-2",
    )
    expected = copy.deepcopy(pod)
    affinity = expected["spec"]["affinity"]
    affinity["podAntiAffinity"][REQUIRED].append(term | {"topologyKey": LABEL_ESXI_HOST})
    terms = affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    terms[0]["matchExpressions"].append(HOST_EXISTS)
    terms[1]["matchExpressions"] = [HOST_EXISTS]
    expected["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": LABEL_ESXI_HOST,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "db"}},
            "matchLabelKeys": ["controller-revision-hash"],
        }
    ]
    return pod, expected


def virt_launcher() -> tuple[dict[str, Any], dict[str, Any]]:
    """A virt-launcher pod as virt-controller renders it from an opted-in VMI: the VMI's labels,
    annotations, affinity and spread constraints, plus KubeVirt's own labels and node term."""
    labels = {
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": "3f1e2d4c-0000-4000-8000-00000000000a",
        "vm.kubevirt.io/name": "vm-db-1",
        "kubevirt.io/vm-pool-revision-name": "vm-db-7f9c",
        "workload": "vm-db",
    }
    annotations = {
        "kubevirt.io/domain": "vm-db-1",
        "kubectl.kubernetes.io/default-container": "compute",
        POD_PHYSICAL_ANTI_AFFINITY: "true",
        POD_SPREAD_ACROSS_HOSTS: "2",
    }
    term = {"labelSelector": {"matchLabels": {"workload": "vm-db"}}, "topologyKey": HOSTNAME}
    kubevirt_node_term = {
        "matchExpressions": [
            {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}
        ]
    }
    zone_spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"workload": "vm-db"}},
    }
    spec = {
        "affinity": {
            "podAntiAffinity": {REQUIRED: [term]},
            "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [kubevirt_node_term]}},
        },
        "topologySpreadConstraints": [zone_spread],
        "restartPolicy": "Never",
    }
    owner = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "name": "vm-db-1",
        "uid": labels["kubevirt.io/created-by"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pod = _pod(
        labels, annotations, spec, generateName="virt-launcher-vm-db-1-", ownerReferences=[owner]
    )
    expected = copy.deepcopy(pod)
    affinity = expected["spec"]["affinity"]
    # The twin leaves out the VM's own pods: a migration target never counts its source. The
    # requirement is in the selector itself, so an API server that merges no mismatchLabelKeys
    # (before v1.31) stores it too.
    own_vm = {"key": "kubevirt.io/created-by", "operator": "NotIn",
              "values": [labels["kubevirt.io/created-by"]]}  # fmt: skip
    selector = {**term["labelSelector"], "matchExpressions": [own_vm]}
    twin = term | {"topologyKey": LABEL_ESXI_HOST, "labelSelector": selector}
    affinity["podAntiAffinity"][REQUIRED].append(twin)
    affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0]["matchExpressions"].append(
        HOST_EXISTS
    )
    expected["spec"]["topologySpreadConstraints"].append(
        {
            "maxSkew": 2,
            "topologyKey": LABEL_ESXI_HOST,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"workload": "vm-db"}},
            "matchLabelKeys": ["kubevirt.io/vm-pool-revision-name"],
        }
    )
    return pod, expected


MIGRATION_TARGET_VMI = "3f1e2d4c-0000-4000-8000-00000000000b"
# What a migration target's host-key terms and spreads gain: its own VM (source and itself)
# left out.
OWN_VM_LEFT_OUT = {"key": "kubevirt.io/created-by", "operator": "NotIn",
                   "values": [MIGRATION_TARGET_VMI]}  # fmt: skip


def migration_target() -> tuple[dict[str, Any], dict[str, Any]]:
    """A live migration's target virt-launcher pod: the source's labels plus the migration's,
    KubeVirt's hostname term on its own VMI's uid, required and preferred hostname terms, a
    hostname spread (moved, its own VM left out) and one with no selector (moved only)."""
    uid = MIGRATION_TARGET_VMI
    labels = {
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": uid,
        "kubevirt.io/migrationJobUID": "9a8b7c6d-0000-4000-8000-00000000000c",
        "workload": "vm-db",
    }
    apart = {"labelSelector": {"matchLabels": {"workload": "vm-db"}}, "topologyKey": HOSTNAME}
    own_node = {"labelSelector": {"matchLabels": {"kubevirt.io/created-by": uid}},
                "topologyKey": HOSTNAME}  # fmt: skip
    tenant = {**apart, "mismatchLabelKeys": ["tenant"]}
    spec = {
        "affinity": {
            "podAntiAffinity": {
                REQUIRED: [apart, own_node],
                PREFERRED: [
                    {"weight": 10, "podAffinityTerm": tenant},
                    {"weight": 20, "podAffinityTerm": {"topologyKey": HOSTNAME}},
                ],
            }
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"workload": "vm-db"}}},
            {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway"},
        ],
    }  # fmt: skip
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
    pod = _pod(labels, annotations, spec, generateName="virt-launcher-vm-db-2-")
    expected = copy.deepcopy(pod)
    spreads = expected["spec"]["topologySpreadConstraints"]
    spreads[0] |= {"topologyKey": LABEL_ESXI_HOST, "labelSelector": {
        "matchLabels": {"workload": "vm-db"}, "matchExpressions": [OWN_VM_LEFT_OUT]}}  # fmt: skip
    spreads[1] |= {"topologyKey": LABEL_ESXI_HOST}
    anti = expected["spec"]["affinity"]["podAntiAffinity"]

    def on_host_without_own_vm(term: dict[str, Any]) -> dict[str, Any]:
        selector = {**term["labelSelector"], "matchExpressions": [OWN_VM_LEFT_OUT]}
        return term | {"topologyKey": LABEL_ESXI_HOST, "labelSelector": selector}

    anti[REQUIRED] += [on_host_without_own_vm(apart), on_host_without_own_vm(own_node)]
    anti[PREFERRED][0]["podAffinityTerm"] = on_host_without_own_vm(tenant)
    # No selector: the term selects nothing, so there is nothing to leave out.
    anti[PREFERRED][1]["podAffinityTerm"]["topologyKey"] = LABEL_ESXI_HOST
    expected["spec"]["affinity"]["nodeAffinity"] = {
        REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [HOST_EXISTS]}]}
    }
    return pod, expected


def migration_target_spread() -> tuple[dict[str, Any], dict[str, Any]]:
    """A VirtualMachinePool replica's migration target with the spread annotation (and no
    physical opt-in): the spread over hosts among its revision leaves its own VM out."""
    labels = {
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": MIGRATION_TARGET_VMI,
        "kubevirt.io/migrationJobUID": "9a8b7c6d-0000-4000-8000-00000000000d",
        "kubevirt.io/vm-pool-revision-name": "vm-db-7f9c",
        "workload": "vm-db",
    }
    pod = _pod(labels, {POD_SPREAD_ACROSS_HOSTS: "1"}, {},
               generateName="virt-launcher-vm-db-2-")  # fmt: skip
    expected = copy.deepcopy(pod)
    expected["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": LABEL_ESXI_HOST,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {
                "matchLabels": {"workload": "vm-db"},
                "matchExpressions": [OWN_VM_LEFT_OUT],
            },
            "matchLabelKeys": ["kubevirt.io/vm-pool-revision-name"],
        }
    ]
    return pod, expected


def required_and_preferred() -> tuple[dict[str, Any], dict[str, Any]]:
    """Two required and two preferred hostname terms among terms on other keys, which stay."""
    required = [
        {
            "labelSelector": {"matchLabels": {"app": "api"}},
            "topologyKey": HOSTNAME,
            "namespaceSelector": {"matchLabels": {"team": "payments"}},
            "mismatchLabelKeys": ["tenant"],
        },
        {"labelSelector": {"matchLabels": {"app": "api"}}, "topologyKey": "zone"},
        {"labelSelector": {"matchLabels": {"tier": "cache"}}, "topologyKey": HOSTNAME},
    ]
    preferred = [
        {"weight": 80, "podAffinityTerm": {"topologyKey": HOSTNAME, "namespaceSelector": {}}},
        {"weight": 20, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {}}},
        {
            "weight": 5,
            "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "api"}},
                "topologyKey": HOSTNAME,
                "matchLabelKeys": ["pod-template-hash"],
            },
        },
    ]
    affinity_term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}
    pod = _pod(
        {"app": "api", "tenant": "t1", "pod-template-hash": "5f6d7"},
        {POD_PHYSICAL_ANTI_AFFINITY: "true"},
        {
            "affinity": {
                "podAffinity": {PREFERRED: [{"weight": 10, "podAffinityTerm": affinity_term}]},
                "podAntiAffinity": {REQUIRED: required, PREFERRED: preferred},
            }
        },
        generateName="api-5f6d7-",
    )
    expected = copy.deepcopy(pod)
    anti = expected["spec"]["affinity"]["podAntiAffinity"]
    anti[REQUIRED].append(required[0] | {"topologyKey": LABEL_ESXI_HOST})
    anti[REQUIRED].append(required[2] | {"topologyKey": LABEL_ESXI_HOST})
    anti[PREFERRED][0]["podAffinityTerm"]["topologyKey"] = LABEL_ESXI_HOST
    anti[PREFERRED][2]["podAffinityTerm"]["topologyKey"] = LABEL_ESXI_HOST
    expected["spec"]["affinity"]["nodeAffinity"] = {
        REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [HOST_EXISTS]}]}
    }
    return pod, expected


def hostname_spreads() -> tuple[dict[str, Any], dict[str, Any]]:
    """An opted-in Deployment pod spreading over nodes two ways and over zones, with the spread
    annotation too: both hostname spreads move to the host key (scoped to the revision), the
    zone spread stays, and the annotation adds nothing beside them."""
    selector = {"matchLabels": {"app": "cache"}}
    written = [
        {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": selector, "minDomains": 2},
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
         "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector},
        {"maxSkew": 2, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": selector, "matchLabelKeys": ["tier"]},
    ]  # fmt: skip
    pod = _pod(
        {"app": "cache", "tier": "t1", "pod-template-hash": "7c9d"},
        {POD_PHYSICAL_ANTI_AFFINITY: "true", POD_SPREAD_ACROSS_HOSTS: "1"},
        {"topologySpreadConstraints": written},
        generateName="cache-7c9d-",
    )
    expected = copy.deepcopy(pod)
    spreads = expected["spec"]["topologySpreadConstraints"]
    spreads[0] |= {"topologyKey": LABEL_ESXI_HOST, "matchLabelKeys": ["pod-template-hash"]}
    spreads[2] |= {"topologyKey": LABEL_ESXI_HOST, "matchLabelKeys": ["tier", "pod-template-hash"]}
    return pod, expected


def already_mutated() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Deployment pod as our patch left it (reinvocation): nothing more to do."""
    _, mutated = deployment()
    return mutated, copy.deepcopy(mutated)


def not_opted_in() -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded pod without the annotation: admitted as it is."""
    pod, _ = deployment()
    pod = copy.deepcopy(pod)
    del pod["metadata"]["annotations"][POD_PHYSICAL_ANTI_AFFINITY]
    return pod, copy.deepcopy(pod)


CASES = {
    "deployment-pod": deployment,
    "statefulset-pod-spread": statefulset,
    "virt-launcher-pod": virt_launcher,
    "migration-target-pod": migration_target,
    "migration-target-spread-annotation": migration_target_spread,
    "required-and-preferred": required_and_preferred,
    "hostname-spreads": hostname_spreads,
    "already-mutated": already_mutated,
    "not-opted-in": not_opted_in,
}


ZONE = "topology.kubernetes.io/zone"
WEB = {"matchLabels": {"app": "web"}}


def spread_on(key: str, when: str, **fields: Any) -> dict[str, Any]:
    written = {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": WEB}
    return written | fields


def with_spreads(constraints: list[dict[str, Any]], **annotations: str) -> dict[str, Any]:
    """The recorded Deployment pod with only these spreads and annotations (no affinity)."""
    pod = copy.deepcopy(deployment()[0])
    pod["metadata"]["annotations"] = annotations
    pod["spec"] = {"containers": pod["spec"]["containers"]}
    pod["spec"]["topologySpreadConstraints"] = constraints
    return pod


OPTED_IN = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
SCOPED = {"matchLabelKeys": ["pod-template-hash"]}
BY_REVISION = {"matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]}

# Hostname spreads of opted-in pods, read on the host key: (written constraints, the pod's
# annotations, the constraints the API server stores).
HOSTNAME_SPREADS = {
    "do-not-schedule-moved-and-scoped": (
        [spread_on(HOSTNAME, "DoNotSchedule")],
        OPTED_IN,
        [spread_on(LABEL_ESXI_HOST, "DoNotSchedule", **SCOPED)],
    ),
    "schedule-anyway-moved-and-scoped": (
        [spread_on(HOSTNAME, "ScheduleAnyway")],
        OPTED_IN,
        [spread_on(LABEL_ESXI_HOST, "ScheduleAnyway", **SCOPED)],
    ),
    "every-other-field-kept": (
        [
            spread_on(
                HOSTNAME,
                "DoNotSchedule",
                maxSkew=2,
                minDomains=3,
                nodeAffinityPolicy="Ignore",
                nodeTaintsPolicy="Honor",
                matchLabelKeys=["tier"],
            )
        ],
        OPTED_IN,
        [
            spread_on(
                LABEL_ESXI_HOST,
                "DoNotSchedule",
                maxSkew=2,
                minDomains=3,
                nodeAffinityPolicy="Ignore",
                nodeTaintsPolicy="Honor",
                matchLabelKeys=["tier", "pod-template-hash"],
            )
        ],
    ),
    "both-kinds-moved-zone-untouched": (
        [
            spread_on(ZONE, "DoNotSchedule"),
            spread_on(HOSTNAME, "ScheduleAnyway"),
            spread_on(HOSTNAME, "DoNotSchedule"),
        ],
        OPTED_IN,
        [
            spread_on(ZONE, "DoNotSchedule"),
            spread_on(LABEL_ESXI_HOST, "ScheduleAnyway", **SCOPED),
            spread_on(LABEL_ESXI_HOST, "DoNotSchedule", **SCOPED),
        ],
    ),
    "same-kind-host-spread-present-hostname-stays": (
        [spread_on(LABEL_ESXI_HOST, "DoNotSchedule"), spread_on(HOSTNAME, "DoNotSchedule")],
        OPTED_IN,
        [spread_on(LABEL_ESXI_HOST, "DoNotSchedule"), spread_on(HOSTNAME, "DoNotSchedule")],
    ),
    "other-kind-host-spread-present-moved": (
        [spread_on(LABEL_ESXI_HOST, "ScheduleAnyway"), spread_on(HOSTNAME, "DoNotSchedule")],
        OPTED_IN,
        [
            spread_on(LABEL_ESXI_HOST, "ScheduleAnyway"),
            spread_on(LABEL_ESXI_HOST, "DoNotSchedule", **SCOPED),
        ],
    ),
    "revision-already-in-match-label-keys": (
        [spread_on(HOSTNAME, "DoNotSchedule", **SCOPED)],
        OPTED_IN,
        [spread_on(LABEL_ESXI_HOST, "DoNotSchedule", **SCOPED)],
    ),
    "revision-named-by-the-selector-not-added": (
        [
            spread_on(
                HOSTNAME,
                "DoNotSchedule",
                labelSelector={
                    "matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]
                },
            )
        ],
        OPTED_IN,
        [
            spread_on(
                LABEL_ESXI_HOST,
                "DoNotSchedule",
                labelSelector={
                    "matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]
                },
            )
        ],
    ),
    "no-selector-no-match-label-keys": (
        [{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule"}],
        OPTED_IN,
        [{"maxSkew": 1, "topologyKey": LABEL_ESXI_HOST, "whenUnsatisfiable": "DoNotSchedule"}],
    ),
    "annotated-spread-not-added-beside-a-moved-one": (
        [spread_on(HOSTNAME, "DoNotSchedule")],
        {**OPTED_IN, POD_SPREAD_ACROSS_HOSTS: "2"},
        [spread_on(LABEL_ESXI_HOST, "DoNotSchedule", **SCOPED)],
    ),
    "not-opted-in-left-as-written": (
        [spread_on(HOSTNAME, "DoNotSchedule")],
        {},
        [spread_on(HOSTNAME, "DoNotSchedule")],
    ),
    "spread-annotation-alone-does-not-move-hostname-spreads": (
        [spread_on(HOSTNAME, "DoNotSchedule")],
        {POD_SPREAD_ACROSS_HOSTS: "1"},
        [
            spread_on(HOSTNAME, "DoNotSchedule"),
            {
                "maxSkew": 1,
                "topologyKey": LABEL_ESXI_HOST,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": WEB,
                **SCOPED,
            },
        ],
    ),
}
