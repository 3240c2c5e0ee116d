"""The admission mutation through the AdmissionReview wire format, against golden pods.

Each review goes in as kube-apiserver sends it; the answer's base64 JSONPatch is applied with
the `jsonpatch` library, as the API server applies it, and must give the golden pod.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from hostaffinity.admission_webhook.core.admission_v1 import decode_review
from hostaffinity.admission_webhook.core.mutation import MutationSettings, Outcome, plan_pod
from hostaffinity.schema.names import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    POD_SPREAD_ACROSS_HOSTS,
)
from tests.platform.builders.admission_golden import (
    CASES,
    FIXTURE,
    HOSTNAME,
    HOSTNAME_SPREADS,
    OPTED_IN,
    admitted,
    answer,
    recorded_reviews,
    review,
    spread_on,
    with_spreads,
)

DEFAULT = MutationSettings()


@pytest.mark.parametrize("case", list(CASES))
def test_golden_pod_after_the_patch(case: str) -> None:
    pod, expected = CASES[case]()
    original = copy.deepcopy(pod)
    assert admitted(pod) == expected
    assert pod == original, "the planner must not modify the object it was given"


@pytest.mark.parametrize("case", list(CASES))
def test_reinvocation_adds_nothing(case: str) -> None:
    pod, _ = CASES[case]()
    once = admitted(pod)
    assert plan_pod(once, DEFAULT).operations == []


@pytest.mark.parametrize("case", ["already-mutated", "not-opted-in"])
def test_nothing_to_do_is_no_patch_at_all(case: str) -> None:
    pod, _ = CASES[case]()
    response = answer(review(pod))["response"]
    assert "patch" not in response
    assert "patchType" not in response
    assert plan_pod(pod, DEFAULT).outcome is Outcome.UNCHANGED


def test_answer_echoes_the_recorded_review() -> None:
    """uid, apiVersion and kind echoed, as the real server accepted (fixture response_body)."""
    recorded = recorded_reviews()[0]
    reply = answer(json.dumps(recorded["request_body"]).encode())
    accepted = recorded["response_body"]
    assert reply["apiVersion"] == accepted["apiVersion"]
    assert reply["kind"] == accepted["kind"]
    assert reply["response"]["uid"] == accepted["response"]["uid"]
    assert reply["response"]["allowed"] is True


def test_dry_run_review_gets_the_same_patch() -> None:
    """The API server sends dry-run creates too; the answer is the same and has no side effect."""
    first, dry = (r["request_body"] for r in recorded_reviews()[:2])
    assert dry["request"]["dryRun"] is True
    ours = answer(json.dumps(first).encode())["response"]["patch"]
    assert answer(json.dumps(dry).encode())["response"]["patch"] == ours


def test_required_twin_copies_what_the_server_merges_later() -> None:
    """The stored pod of the fixture: the API server merged matchLabelKeys into the twin too.
    Our twin carries matchLabelKeys (not a merged selector), like the hostname term."""
    pod, _ = CASES["deployment-pod"]()
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    stored = json.loads(FIXTURE.read_text())["stored_pod"]["spec"]["affinity"]["podAntiAffinity"]
    ours = admitted(pod)["spec"]["affinity"]["podAntiAffinity"][required]
    stored_twin = stored[required][1]
    assert ours[1]["matchLabelKeys"] == stored_twin["matchLabelKeys"]
    assert ours[1]["topologyKey"] == stored_twin["topologyKey"] == LABEL_ESXI_HOST


def _opted_in_pod(**annotations: str) -> dict[str, Any]:
    pod, _ = CASES["deployment-pod"]()
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"] = annotations
    return pod


def test_cluster_wide_mode_needs_no_annotation() -> None:
    pod = _opted_in_pod()
    assert plan_pod(pod, DEFAULT).operations == []
    assert plan_pod(pod, MutationSettings(physical_anti_affinity="cluster-wide")).twins == 2


def test_disabled_mode_adds_no_twin_even_when_annotated() -> None:
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "true"})
    assert plan_pod(pod, MutationSettings(physical_anti_affinity="disabled")).operations == []


def test_annotation_must_say_true() -> None:
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "false"})
    assert plan_pod(pod, DEFAULT).operations == []


def test_unknown_placement_pass_adds_no_host_label_requirement() -> None:
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "true"})
    stored = admitted(pod, MutationSettings(fail_unplaced=False))
    assert "nodeAffinity" not in stored["spec"]["affinity"]


def test_preferred_only_pod_gets_no_host_label_requirement() -> None:
    """A preference must stay soft: requiring the label would turn it into a hard rule."""
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "true"})
    del pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    stored = admitted(pod)
    assert "nodeAffinity" not in stored["spec"]["affinity"]
    term = stored["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ][0]
    assert term["weight"] == 50
    assert term["podAffinityTerm"]["topologyKey"] == LABEL_ESXI_HOST


def test_a_virt_launcher_pods_host_terms_leave_out_its_own_vm() -> None:
    """Preferred terms moved to the host key and required twins alike, in the selector itself
    (an API server before v1.31 would drop a mismatchLabelKeys unmerged); once only; the pod's
    own mismatchLabelKeys as written; a pod that is no virt-launcher pod keeps its terms as they
    were."""
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "true"})
    anti = pod["spec"]["affinity"]["podAntiAffinity"]
    anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "mismatchLabelKeys"
    ] = ["tenant"]
    plain = admitted(pod)
    pod["metadata"]["labels"]["kubevirt.io/created-by"] = "uid-vmi-a"
    launcher = admitted(pod)
    assert plan_pod(launcher, DEFAULT).operations == []
    own_vm = {"key": "kubevirt.io/created-by", "operator": "NotIn", "values": ["uid-vmi-a"]}
    for stored, added in ((plain, []), (launcher, [own_vm])):
        anti = stored["spec"]["affinity"]["podAntiAffinity"]
        preferred = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert preferred["mismatchLabelKeys"] == ["tenant"]
        assert preferred["labelSelector"].get("matchExpressions", []) == added
        twins = [
            term
            for term in anti["requiredDuringSchedulingIgnoredDuringExecution"]
            if term["topologyKey"] == LABEL_ESXI_HOST
        ]
        assert twins
        assert all("mismatchLabelKeys" not in term for term in twins)
        assert all(term["labelSelector"].get("matchExpressions", []) == added for term in twins)


def test_spread_can_be_hard_by_setting() -> None:
    pod = _opted_in_pod(**{POD_SPREAD_ACROSS_HOSTS: "3"})
    stored = admitted(pod, MutationSettings(spread_when_unsatisfiable="DoNotSchedule"))
    (constraint,) = stored["spec"]["topologySpreadConstraints"]
    assert constraint == {
        "maxSkew": 3,
        "topologyKey": LABEL_ESXI_HOST,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
        "matchLabelKeys": ["pod-template-hash"],
    }
    # Spread alone is an opt-in of its own: the hostname terms are left as they were.
    assert stored["spec"]["affinity"] == pod["spec"]["affinity"]


def _spread(value: str) -> Any:
    return lambda p: p["metadata"]["annotations"].update({POD_SPREAD_ACROSS_HOSTS: value})


@pytest.mark.parametrize(
    ("mangle", "says"),
    [
        pytest.param(_spread("two"), "must be a whole number", id="spread-not-a-number"),
        pytest.param(_spread("0"), "must be a whole number", id="spread-zero"),
        pytest.param(_spread("2147483648"), "from 1 to 2147483647", id="spread-beyond-int32"),
        pytest.param(_spread("\u00b2"), "must be a whole number", id="spread-unicode-digit"),
        pytest.param(
            lambda p: p["spec"]["affinity"]["podAntiAffinity"].update(
                {"requiredDuringSchedulingIgnoredDuringExecution": {"topologyKey": "x"}}
            ),
            "is not a list",
            id="terms-not-a-list",
        ),
        pytest.param(
            lambda p: p["spec"]["affinity"].update({"podAntiAffinity": "yes"}),
            "is not an object",
            id="anti-affinity-not-an-object",
        ),
        pytest.param(
            lambda p: p["metadata"]["labels"].clear() or _spread("1")(p),
            "no labels its replicas share",
            id="spread-without-labels",
        ),
    ],
)
def test_uninterpretable_pod_is_admitted_unpatched_with_a_warning(mangle: Any, says: str) -> None:
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "true"})
    mangle(pod)
    response = answer(review(pod))["response"]
    assert response["allowed"] is True
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert says in warning
    assert plan_pod(pod, DEFAULT).outcome is Outcome.WARNED


@pytest.mark.parametrize(
    ("operation", "kind"),
    [("UPDATE", "Pod"), ("CREATE", "VirtualMachineInstance"), ("DELETE", "Pod")],
)
def test_only_pod_creates_are_mutated(operation: str, kind: str) -> None:
    pod = _opted_in_pod(**{POD_PHYSICAL_ANTI_AFFINITY: "true"})
    body = json.loads(review(pod))
    body["request"]["operation"] = operation
    body["request"]["kind"]["kind"] = kind
    assert "patch" not in answer(json.dumps(body).encode())["response"]


@pytest.mark.parametrize(
    "body",
    [b"", b"{", b"[]", b'{"request": {}}', b'{"request": {"uid": 7}}', b'"AdmissionReview"'],
)
def test_unreadable_review_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_review(body)


def _kinds(constraints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["topologyKey"], c["whenUnsatisfiable"]) for c in constraints]


@pytest.mark.parametrize("case", list(HOSTNAME_SPREADS))
def test_hostname_spread_read_on_the_host_key(case: str) -> None:
    written, annotations, stored_constraints = HOSTNAME_SPREADS[case]
    pod = with_spreads(copy.deepcopy(written), **annotations)
    stored = admitted(pod)
    assert stored["spec"]["topologySpreadConstraints"] == stored_constraints
    kinds = _kinds(stored["spec"]["topologySpreadConstraints"])
    assert len(set(kinds)) == len(kinds), "the API server refuses a repeated key and action"
    assert plan_pod(stored, DEFAULT).operations == [], "reinvocation adds nothing"
    moved = sum(
        1
        for w, s in zip(written, stored_constraints, strict=False)
        if w["topologyKey"] != s["topologyKey"]
    )
    assert plan_pod(pod, DEFAULT).spreads_moved == moved


def test_cluster_wide_mode_moves_hostname_spreads_without_the_annotation() -> None:
    pod = with_spreads([spread_on(HOSTNAME, "DoNotSchedule")])
    assert plan_pod(pod, DEFAULT).operations == []
    stored = admitted(pod, MutationSettings(physical_anti_affinity="cluster-wide"))
    assert _kinds(stored["spec"]["topologySpreadConstraints"]) == [
        (LABEL_ESXI_HOST, "DoNotSchedule")
    ]


def test_hostname_spread_that_is_not_an_object_is_a_warning() -> None:
    pod = with_spreads(["hostname"], **OPTED_IN)  # type: ignore[list-item]
    response = answer(review(pod))["response"]
    assert "patch" not in response
    assert "topologySpreadConstraints[0] is not an object" in response["warnings"][0]
