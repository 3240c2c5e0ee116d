"""Every DeschedulerPolicy we ship turns on every strategy the descheduler has.

`make dev` says it runs the descheduler "with every strategy" (scripts/dev.sh, docs/demo.md), and
k8s/base and the chart ship the same list: a strategy added to the registry
(services/descheduler/.../strategies/__init__.py) and left out of one of them fails here, as
RemovePodsViolatingTopologySpreadConstraint once was left out of `make dev`'s policy.
"""

from pathlib import Path
from typing import Any

import pytest
import yaml

from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.core.policy import Policy, load_policy, parse_policy
from hostaffinity.descheduler.core.strategies import REGISTRY
from hostaffinity.runtime.process.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def dev_policy() -> Policy:
    """The policy `make dev` runs: scripts/dev.sh starts the descheduler from the repository
    with `--config scripts/dev/descheduler.yaml`, whose policy_file is relative to it."""
    config = load_config(DeschedulerConfig, [ROOT / "scripts/dev/descheduler.yaml"], environ={})
    policy_file = config.descheduler.policy_file
    assert policy_file is not None
    return load_policy(ROOT / policy_file)


def base_policy() -> Policy:
    text = (ROOT / "k8s/base/descheduler/configmap.yaml").read_text(encoding="utf-8")
    configmap: dict[str, Any] = yaml.safe_load(text)
    return parse_policy(yaml.safe_load(configmap["data"]["descheduler-policy.yaml"]))


def chart_policy() -> Policy:
    values = yaml.safe_load((ROOT / "charts/hostaffinity/values.yaml").read_text(encoding="utf-8"))
    policy: dict[str, Any] = values["descheduler"]["policy"]
    return parse_policy(policy)


SHIPPED = {"make-dev": dev_policy, "k8s-base": base_policy, "helm-chart": chart_policy}


@pytest.mark.parametrize("shipped", list(SHIPPED))
def test_the_policy_enables_every_registered_strategy(shipped: str) -> None:
    policy = SHIPPED[shipped]()
    enabled = {s.name for profile in policy.profiles for s in profile.strategies}
    assert sorted(set(REGISTRY) - enabled) == [], "strategies the policy leaves out"
    assert len(enabled) == len(REGISTRY)
