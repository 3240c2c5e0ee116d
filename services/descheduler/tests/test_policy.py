"""Upstream DeschedulerPolicy files load unchanged; anything unsupported is a named error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostaffinity.descheduler.core.policy import PolicyError, load_policy, parse_policy
from hostaffinity.descheduler.core.protections import DAEMONSET, LOCAL_STORAGE, WITH_PVC
from hostaffinity.descheduler.core.strategies import StrategyArgsError, build_strategy
from hostaffinity.descheduler.core.strategies.node_affinity import REQUIRED, NodeAffinity
from tests.recorded_fixtures import fixture_dir


def policy(**overrides: Any) -> dict[str, Any]:
    profile = {
        "name": "p",
        "pluginConfig": [{"name": "DefaultEvictor", "args": {}}],
        "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
    }
    profile.update(overrides.pop("profile", {}))
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [profile],
        **overrides,
    }


def test_the_shared_fixture_policy_loads() -> None:
    fixture = fixture_dir("descheduler") / "policy-affinity-v1alpha2.yaml"
    assert fixture.is_file(), f"missing fixture {fixture}"
    loaded = load_policy(fixture)
    [profile] = loaded.profiles
    assert [s.name for s in profile.strategies] == [
        "RemovePodsViolatingInterPodAntiAffinity",
        "RemovePodsViolatingNodeAffinity",
        "RemovePodsViolatingNodeTaints",
    ]
    node_affinity = profile.strategies[1]
    assert isinstance(node_affinity, NodeAffinity)
    assert node_affinity.args.node_affinity_type == [REQUIRED]
    assert {LOCAL_STORAGE, DAEMONSET} <= profile.protections.active


def test_limits_and_evictor_args_are_read() -> None:
    loaded = parse_policy(
        policy(
            maxNoOfPodsToEvictPerNode=3,
            maxNoOfPodsToEvictPerNamespace=2,
            maxNoOfPodsToEvictTotal=9,
            profile={
                "pluginConfig": [
                    {
                        "name": "DefaultEvictor",
                        "args": {
                            "podProtections": {
                                "extraEnabled": ["PodsWithPVC"],
                                "defaultDisabled": ["PodsWithLocalStorage"],
                            },
                            "minPodAge": "10m",
                            "priorityThreshold": {"value": 1000},
                        },
                    }
                ]
            },
        )
    )
    assert (loaded.limits.per_node, loaded.limits.per_namespace, loaded.limits.total) == (3, 2, 9)
    active = loaded.profiles[0].protections.active
    assert WITH_PVC in active
    assert LOCAL_STORAGE not in active


def test_an_unsupported_plugin_is_an_error_naming_it() -> None:
    doc = policy(profile={"plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}})
    with pytest.raises(PolicyError, match="'LowNodeUtilization' is not supported"):
        parse_policy(doc)
    doc = policy(profile={"pluginConfig": [{"name": "PodLifeTime", "args": {}}]})
    with pytest.raises(PolicyError, match="'PodLifeTime' is not supported"):
        parse_policy(doc)


def test_every_problem_is_reported_at_once() -> None:
    doc = policy(
        maxNoOfPodsToEvictPerNode=-1,
        profile={
            "pluginConfig": [
                {
                    "name": "DefaultEvictor",
                    "args": {"minPodAge": "soon", "noEvictionPolicy": "Sometimes"},
                },
                {
                    "name": "RemovePodsViolatingNodeAffinity",
                    "args": {"nodeAffinityType": ["sometimes"]},
                },
                {
                    "name": "RemovePodsViolatingNodeTaints",
                    "args": {"excludedTaints": ["a"], "includedTaints": ["b"]},
                },
            ],
            "plugins": {
                "deschedule": {
                    "enabled": ["RemovePodsViolatingNodeAffinity", "RemovePodsViolatingNodeTaints"]
                }
            },
        },
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc)
    message = str(caught.value)
    for needle in (
        "must not be negative",
        "minPodAge",
        "noEvictionPolicy",
        "'sometimes'",
        "excludedTaints and includedTaints",
    ):
        assert needle in message


def test_unknown_keys_are_errors() -> None:
    with pytest.raises(PolicyError, match="profilez"):
        parse_policy({**policy(), "profilez": []})
    with pytest.raises(StrategyArgsError, match="nodeAfinityType"):
        build_strategy("RemovePodsViolatingNodeAffinity", {"nodeAfinityType": []})


def test_a_file_that_is_not_a_policy_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(PolicyError, match="is a mapping"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
