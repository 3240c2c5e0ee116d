"""Upstream `descheduler/v1alpha2` DeschedulerPolicy files, read unchanged.

Field names and defaults of pkg/api/v1alpha2 (DeschedulerPolicy, Profile, Plugins,
PluginConfig): profiles with `pluginConfig` and `plugins.{deschedule,balance,filter,
preEvictionFilter,...}.enabled`, `DefaultEvictor` args for the protections, and the
policy-level `maxNoOfPodsToEvictPerNode` / `PerNamespace` / `Total` and `nodeSelector`. A plugin
this descheduler does not implement is an error naming it (never silently ignored); every
problem in a file is reported at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import yaml

from hostaffinity.descheduler.core.eviction_planner import EvictionLimits
from hostaffinity.descheduler.core.protections import DefaultEvictorArgs, Protections
from hostaffinity.descheduler.core.strategies import REGISTRY, StrategyArgsError, build_strategy
from hostaffinity.descheduler.core.strategies.base import Strategy

API_VERSION: Final = "descheduler/v1alpha2"
KIND: Final = "DeschedulerPolicy"
DEFAULT_EVICTOR: Final = "DefaultEvictor"
# Extension points where a strategy runs, and those that only take the DefaultEvictor.
STRATEGY_POINTS: Final = ("deschedule", "balance")
EVICTOR_POINTS: Final = ("filter", "preEvictionFilter", "evict", "sort", "presort")


class PolicyError(ValueError):
    """The policy cannot be used; the message lists every problem."""


class _Doc(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    pass


class PluginSet(_Doc, frozen=True):
    enabled: list[str] = msgspec.field(default_factory=list)
    disabled: list[str] = msgspec.field(default_factory=list)


class Plugins(_Doc, frozen=True):
    presort: PluginSet = msgspec.field(default_factory=PluginSet)
    sort: PluginSet = msgspec.field(default_factory=PluginSet)
    deschedule: PluginSet = msgspec.field(default_factory=PluginSet)
    balance: PluginSet = msgspec.field(default_factory=PluginSet)
    evict: PluginSet = msgspec.field(default_factory=PluginSet)
    filter: PluginSet = msgspec.field(default_factory=PluginSet)
    pre_eviction_filter: PluginSet = msgspec.field(default_factory=PluginSet)


class PluginConfig(_Doc, frozen=True):
    name: str
    args: dict[str, Any] | None = None


class ProfileDoc(_Doc, frozen=True):
    name: str
    plugin_config: list[PluginConfig] = msgspec.field(default_factory=list)
    plugins: Plugins = msgspec.field(default_factory=Plugins)


class PolicyDoc(_Doc, frozen=True):
    api_version: str
    kind: str
    profiles: list[ProfileDoc] = msgspec.field(default_factory=list)
    node_selector: str | None = None
    max_no_of_pods_to_evict_per_node: int | None = None
    max_no_of_pods_to_evict_per_namespace: int | None = None
    max_no_of_pods_to_evict_total: int | None = None
    eviction_failure_event_notification: bool | None = None
    grace_period_seconds: int | None = None


@dataclass(frozen=True)
class Profile:
    """One profile: its DefaultEvictor and its strategies, in the order they run."""

    name: str
    protections: Protections
    strategies: tuple[Strategy, ...]


@dataclass(frozen=True)
class Policy:
    profiles: tuple[Profile, ...]
    limits: EvictionLimits
    node_selector: str = ""
    grace_period_seconds: int | None = None


def load_policy(path: str | Path) -> Policy:
    """Read and check a DeschedulerPolicy YAML file."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise PolicyError(f"{path}: cannot read the policy: {error}") from error
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{path}: a policy is a mapping, not {type(raw).__name__}")
    try:
        return parse_policy(raw)
    except PolicyError as error:
        raise PolicyError(f"{path}: {error}") from error


def parse_policy(raw: Mapping[str, Any]) -> Policy:
    """Build the policy from its decoded document."""
    try:
        doc = msgspec.convert(dict(raw), PolicyDoc)
    except msgspec.ValidationError as error:
        raise PolicyError(str(error)) from error
    errors: list[str] = []
    if doc.api_version != API_VERSION or doc.kind != KIND:
        errors.append(
            f"expected apiVersion {API_VERSION} kind {KIND}, got {doc.api_version} {doc.kind}"
        )
    for field_name in (
        "max_no_of_pods_to_evict_per_node",
        "max_no_of_pods_to_evict_per_namespace",
        "max_no_of_pods_to_evict_total",
    ):
        value = getattr(doc, field_name)
        if value is not None and value < 0:
            errors.append(f"{field_name} must not be negative")
    if not doc.profiles:
        errors.append("the policy has no profiles")
    names = [p.name for p in doc.profiles]
    errors.extend(
        f"profile name {n!r} is used twice"
        for n in sorted({n for n in names if names.count(n) > 1})
    )
    profiles = []
    for profile_doc in doc.profiles:
        profile, problems = _profile(profile_doc, doc.node_selector or "")
        errors.extend(f"profile {profile_doc.name!r}: {p}" for p in problems)
        if profile is not None:
            profiles.append(profile)
    if errors:
        raise PolicyError("; ".join(errors))
    limits = EvictionLimits(
        per_node=doc.max_no_of_pods_to_evict_per_node,
        per_namespace=doc.max_no_of_pods_to_evict_per_namespace,
        total=doc.max_no_of_pods_to_evict_total,
    )
    return Policy(tuple(profiles), limits, doc.node_selector or "", doc.grace_period_seconds)


def _profile(doc: ProfileDoc, policy_node_selector: str) -> tuple[Profile | None, list[str]]:
    errors: list[str] = []
    configs: dict[str, dict[str, Any]] = {}
    for config in doc.plugin_config:
        if config.name in configs:
            errors.append(f"pluginConfig {config.name!r} appears twice")
        configs[config.name] = config.args or {}
    for config_name in configs:
        if config_name != DEFAULT_EVICTOR and config_name not in REGISTRY:
            errors.append(_unsupported(config_name))
    plugins = doc.plugins
    for point in EVICTOR_POINTS:
        plugin_set: PluginSet = getattr(plugins, _attr(point))
        for name in plugin_set.enabled:
            if name != DEFAULT_EVICTOR:
                errors.append(f"{point}: {_unsupported(name)}")
    evictor_args = configs.get(DEFAULT_EVICTOR, {})
    protections = None
    try:
        args = msgspec.convert(dict(evictor_args), DefaultEvictorArgs)
        if policy_node_selector and not args.node_selector:
            args = msgspec.structs.replace(args, node_selector=policy_node_selector)
        problems = args.validate()
        errors.extend(f"{DEFAULT_EVICTOR}: {p}" for p in problems)
        if not problems:
            protections = Protections(args)
    except msgspec.ValidationError as error:
        errors.append(f"{DEFAULT_EVICTOR}: {error}")
    strategies: list[Strategy] = []
    for point in STRATEGY_POINTS:
        plugin_set = getattr(plugins, point)
        for name in plugin_set.enabled:
            if name in plugin_set.disabled:
                continue
            try:
                strategies.append(build_strategy(name, configs.get(name)))
            except StrategyArgsError as error:
                errors.append(f"{point}: {error}")
    if not strategies and not errors:
        errors.append("no deschedule or balance plugin is enabled")
    if errors or protections is None:
        return None, errors
    return Profile(doc.name, protections, tuple(strategies)), errors


def _attr(point: str) -> str:
    return "pre_eviction_filter" if point == "preEvictionFilter" else point


def _unsupported(name: str) -> str:
    return f"plugin {name!r} is not supported (supported: {', '.join(sorted(REGISTRY))})"


# What runs without a policy file: every strategy, required rules only, upstream's defaults.
DEFAULT_POLICY: Final[Mapping[str, Any]] = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "profiles": [
        {
            "name": "hostaffinity",
            "pluginConfig": [{"name": DEFAULT_EVICTOR, "args": {}}],
            "plugins": {
                "deschedule": {
                    "enabled": [
                        "RemovePodsViolatingInterPodAntiAffinity",
                        "RemovePodsViolatingInterPodAffinity",
                        "RemovePodsViolatingNodeAffinity",
                        "RemovePodsViolatingNodeTaints",
                        "RemovePodsViolatingFleetGroups",
                    ]
                },
                "balance": {
                    "enabled": ["RemovePodsViolatingTopologySpreadConstraint", "RemoveDuplicates"]
                },
            },
        }
    ],
}
