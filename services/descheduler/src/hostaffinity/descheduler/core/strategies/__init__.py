"""The strategy registry: upstream plugin name -> args record and plugin class.

Upstream registers plugins the same way (pkg/framework/pluginregistry); a policy naming a plugin
that is not here is an error that names it. Each plugin class carries its own `triggers`, so
the cycle triggers learn what to react to from here rather than knowing every strategy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from hostaffinity.descheduler.core.strategies.base import Args, Plugin, Strategy
from hostaffinity.descheduler.core.strategies.changes import Change
from hostaffinity.descheduler.core.strategies.duplicates import Duplicates, DuplicatesArgs
from hostaffinity.descheduler.core.strategies.fleet_groups import FleetGroups, FleetGroupsArgs
from hostaffinity.descheduler.core.strategies.interpod_affinity import (
    InterPodAffinity,
    InterPodAffinityArgs,
)
from hostaffinity.descheduler.core.strategies.interpod_anti_affinity import (
    InterPodAntiAffinity,
    InterPodAntiAffinityArgs,
)
from hostaffinity.descheduler.core.strategies.node_affinity import NodeAffinity, NodeAffinityArgs
from hostaffinity.descheduler.core.strategies.node_taints import NodeTaints, NodeTaintsArgs
from hostaffinity.descheduler.core.strategies.topology_spread import (
    TopologySpread,
    TopologySpreadArgs,
)


@dataclass(frozen=True)
class Registration:
    """How to build one plugin from its JSON args."""

    args: type[Args]
    plugin: Plugin


REGISTRY: Final[Mapping[str, Registration]] = {
    registration.plugin.name: registration
    for registration in (
        Registration(InterPodAntiAffinityArgs, InterPodAntiAffinity),
        Registration(InterPodAffinityArgs, InterPodAffinity),
        Registration(NodeAffinityArgs, NodeAffinity),
        Registration(NodeTaintsArgs, NodeTaints),
        Registration(DuplicatesArgs, Duplicates),
        Registration(TopologySpreadArgs, TopologySpread),
        Registration(FleetGroupsArgs, FleetGroups),
    )
}


def registered_triggers() -> Change:
    """Every change some registered plugin reacts to."""
    triggers = Change(0)
    for registration in REGISTRY.values():
        triggers |= registration.plugin.triggers
    return triggers


class StrategyArgsError(ValueError):
    """Args that do not decode or do not validate; the message lists every problem."""


def build_strategy(name: str, raw_args: Mapping[str, Any] | None) -> Strategy:
    """Decode, default and validate a plugin's args, then build it."""
    registration = REGISTRY.get(name)
    if registration is None:
        supported = ", ".join(sorted(REGISTRY))
        raise StrategyArgsError(f"plugin {name!r} is not supported (supported: {supported})")
    try:
        args = msgspec.convert(dict(raw_args or {}), registration.args)
    except msgspec.ValidationError as error:
        raise StrategyArgsError(f"{name}: {error}") from error
    problems = args.validate()
    if problems:
        raise StrategyArgsError(f"{name}: " + "; ".join(problems))
    return registration.plugin(args)
