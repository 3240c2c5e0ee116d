"""Compiling topology spread constraints: the scheduler's defaults, matchLabelKeys, the physical
reading of an opted-in pod's hostname spread."""

from __future__ import annotations

from typing import Any

import msgspec

from hostaffinity.affinity.model import Pod
from hostaffinity.affinity.topology_spread import (
    HONOR,
    IGNORE,
    compile_spread_constraints,
)
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY


def _pod(*constraints: dict[str, Any], labels: dict[str, str], opted_in: bool = False) -> Pod:
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"} if opted_in else {}
    return msgspec.convert(
        {
            "metadata": {"name": "p", "namespace": "ns", "labels": labels}
            | {"annotations": annotations},
            "spec": {"topologySpreadConstraints": list(constraints)},
        },
        Pod,
    )


def _spread(key: str, **extra: Any) -> dict[str, Any]:
    return {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", **extra}


def test_absent_fields_take_the_scheduler_defaults() -> None:
    (constraint,) = compile_spread_constraints(
        _pod(_spread("zone", labelSelector={"matchLabels": {"app": "web"}}), labels={})
    )
    assert (constraint.min_domains, constraint.node_affinity_policy) == (1, HONOR)
    assert constraint.node_taints_policy == IGNORE
    assert constraint.hard
    assert not constraint.soft
    assert constraint.selector.matches({"app": "web"})
    assert not constraint.selector.matches({"app": "db"})


def test_match_label_keys_add_the_pods_own_values() -> None:
    pod = _pod(
        _spread("zone", labelSelector={"matchLabels": {"app": "web"}}, matchLabelKeys=["rev", "x"]),
        labels={"app": "web", "rev": "2"},
    )
    (constraint,) = compile_spread_constraints(pod)
    assert constraint.selector.matches({"app": "web", "rev": "2"})
    assert not constraint.selector.matches({"app": "web", "rev": "1"})
    assert constraint.selector.describe() == "{app=web, rev=2}"


def test_match_label_keys_leave_a_null_selector_selecting_nothing() -> None:
    (constraint,) = compile_spread_constraints(
        _pod(_spread("zone", matchLabelKeys=["app"]), labels={"app": "web"})
    )
    assert constraint.selector.nothing


def test_an_opted_in_hostname_spread_is_read_on_the_host_key() -> None:
    spreads = (_spread("kubernetes.io/hostname"), _spread("zone"))
    plain = compile_spread_constraints(_pod(*spreads, labels={}))
    opted = compile_spread_constraints(_pod(*spreads, labels={}, opted_in=True))
    cluster_wide = compile_spread_constraints(_pod(*spreads, labels={}), True)
    assert [c.topology_key for c in plain] == ["kubernetes.io/hostname", "zone"]
    assert [c.topology_key for c in opted] == [LABEL_ESXI_HOST, "zone"]
    assert opted == cluster_wide
    assert opted[0].physical
    assert not plain[0].physical
    assert opted[0].declared_key == "kubernetes.io/hostname"
    assert "physical reading of kubernetes.io/hostname" in opted[0].describe()
