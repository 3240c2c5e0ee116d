"""The MutatingAdmissionPolicy, evaluated by cel-expr-python (tests/admission_policy_cel.py says
how and with which rewrites), must store the webhook's pod for every golden pod and setting."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from hostaffinity.admission_webhook.core.mutation import MutationSettings
from hostaffinity.schema.names import POD_PHYSICAL_ANTI_AFFINITY, POD_SPREAD_ACROSS_HOSTS
from tests.admission_policy_cel import (
    ENV,
    KUBERNETES_VERSION,
    Policy,
    check_object_selections,
    transform_map_via_entries,
    typed_literals_as_maps,
    variable_names,
)
from tests.platform.builders.admission_golden import CASES, HOSTNAME_SPREADS, admitted, with_spreads


def _stored(policy: Policy, pod: dict[str, Any]) -> dict[str, Any]:
    original = copy.deepcopy(pod)
    result = policy.admit(pod)
    assert pod == original, "evaluation must not modify the object it was given"
    assert policy.errors == []
    return result


@pytest.mark.parametrize("case", list(CASES))
def test_policy_stores_the_webhooks_pod(case: str) -> None:
    pod, expected = CASES[case]()
    stored = _stored(Policy.load(), pod)
    assert stored == admitted(pod)
    assert stored == expected
    kubernetes_validate.validate(stored, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("case", list(CASES))
def test_policy_reinvoked_adds_nothing(case: str) -> None:
    """reinvocationPolicy: IfNeeded runs it again on its own output: nothing more to add."""
    pod, _ = CASES[case]()
    policy = Policy.load()
    once = _stored(policy, pod)
    assert _stored(policy, once) == once


def _opted_in_pod(**annotations: str) -> dict[str, Any]:
    pod, _ = CASES["deployment-pod"]()
    pod["metadata"]["annotations"] = {POD_PHYSICAL_ANTI_AFFINITY: "true", **annotations}
    return pod


@pytest.mark.parametrize(
    "skew",
    ["1", "07", "2147483647", "0", "-1", "+1", " 1", "1.0", "", "two", "\u00b2", "2147483648"],
)
def test_policy_reads_the_spread_annotation_as_the_webhook_does(skew: str) -> None:
    """Whole numbers 1..2^31-1 give the spread; anything else leaves the pod alone, twins too."""
    pod = _opted_in_pod(**{POD_SPREAD_ACROSS_HOSTS: skew})
    assert _stored(Policy.load(), pod) == admitted(pod)


def test_policy_leaves_a_spread_without_shared_labels_alone() -> None:
    pod = _opted_in_pod(**{POD_SPREAD_ACROSS_HOSTS: "2"})
    pod["metadata"]["labels"] = {"pod-template-hash": "5f6d7"}
    stored = _stored(Policy.load(), pod)
    assert stored == admitted(pod) == pod


@pytest.mark.parametrize("case", list(HOSTNAME_SPREADS))
def test_policy_moves_hostname_spreads_as_the_webhook_does(case: str) -> None:
    written, annotations, stored_constraints = HOSTNAME_SPREADS[case]
    pod = with_spreads(copy.deepcopy(written), **annotations)
    policy = Policy.load()
    stored = _stored(policy, pod)
    assert stored == admitted(pod)
    assert stored["spec"]["topologySpreadConstraints"] == stored_constraints
    kubernetes_validate.validate(stored, KUBERNETES_VERSION, strict=True)
    assert _stored(policy, stored) == stored


def test_policy_keeps_a_preference_soft() -> None:
    pod = _opted_in_pod()
    del pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    stored = _stored(Policy.load(), pod)
    assert stored == admitted(pod)
    assert "nodeAffinity" not in stored["spec"]["affinity"]


def _cluster_wide(spec: dict[str, Any]) -> None:
    """The change the policy's header asks for in cluster-wide mode."""
    del spec["matchConditions"]
    (opted_in,) = (v for v in spec["variables"] if v["name"] == "optedIn")
    opted_in["expression"] = "true"


def test_cluster_wide_policy_matches_the_cluster_wide_webhook() -> None:
    pod, _ = CASES["not-opted-in"]()
    stored = _stored(Policy.load(_cluster_wide), pod)
    assert stored == admitted(pod, MutationSettings(physical_anti_affinity="cluster-wide"))
    assert stored != pod


def test_policy_with_do_not_schedule_matches_the_webhook_setting() -> None:
    def hard(spec: dict[str, Any]) -> None:
        (constraint,) = (v for v in spec["variables"] if v["name"] == "spreadConstraint")
        constraint["expression"] = constraint["expression"].replace(
            "'ScheduleAnyway'", "'DoNotSchedule'"
        )

    pod = _opted_in_pod(**{POD_SPREAD_ACROSS_HOSTS: "3"})
    webhook = admitted(pod, MutationSettings(spread_when_unsatisfiable="DoNotSchedule"))
    assert _stored(Policy.load(hard), pod) == webhook


def test_the_rewrites_keep_the_expression() -> None:
    """The three rewrites on small sources, so a reader can check them without the policy."""
    spread = "Object.spec.topologySpreadConstraints"
    assert typed_literals_as_maps(
        f"{spread}{{maxSkew: 1, ?matchLabelKeys: t.?k, labelSelector: "
        f"{spread}.labelSelector{{matchLabels: {{'a': 'b: c'}}}}}}"
    ) == (
        "{'maxSkew': 1, ?'matchLabelKeys': t.?k, 'labelSelector': {'matchLabels': {'a': 'b: c'}}}"
    )
    assert typed_literals_as_maps("JSONPatch{op: 'add', value: {}}") == (
        "{'op': 'add', 'value': {}}"
    )
    with pytest.raises(ValueError, match="no field 'topologyKeys'"):
        typed_literals_as_maps("Object.spec.topologySpreadConstraints{topologyKeys: 'x'}")
    with pytest.raises(ValueError, match="no field 'podAntiAfinity'"):
        typed_literals_as_maps("Object.spec.affinity.podAntiAfinity{}")
    assert transform_map_via_entries("m.transformMap(k, v, f(k, v), v)") == (
        "test.mapOfEntries(m.transformList(k, v, f(k, v), [k, v]))"
    )
    assert variable_names("variables.a + 'variables.b' + variables.c") == (
        "variables_a + 'variables.b' + variables_c"
    )


def test_selections_on_object_are_checked_against_the_pod_schema() -> None:
    check_object_selections("object.spec.?affinity.?podAffinity.orValue({}) && object.metadata")
    with pytest.raises(ValueError, match=r"no field 'afinity' in Object\.spec"):
        check_object_selections("size(object.spec.?afinity.orValue([]))")
    with pytest.raises(ValueError, match=r"no field 'topologySpreadConstraint' in Object\.spec"):
        check_object_selections("has(object.spec.topologySpreadConstraint)")


def test_bound_variables_are_lazy_as_kubernetes_variables_are() -> None:
    """Rewrite 2 relies on it: a binding that would fail is never evaluated when unused."""
    source = "cel.bind(variables_bad, int('two'), cel.bind(variables_ok, 1, variables_ok))"
    assert ENV.compile(source).eval(data={"object": {}}).plain_value() == 1
