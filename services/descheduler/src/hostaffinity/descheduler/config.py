"""The descheduler's config record (YAML + HOSTAFFINITY_* environment), strict on unknown keys.

The eviction policy itself is an upstream DeschedulerPolicy file (`descheduler.policy_file`);
without one the built-in policy (policy.DEFAULT_POLICY) runs.
"""

from typing import Literal

from hostaffinity.descheduler.executor import ExecutorSettings
from hostaffinity.descheduler.kubevirt import MigrationLimits
from hostaffinity.runtime.config import ServiceSettings, Settings


class LeaseSettings(Settings, frozen=True):
    """The Lease that keeps exactly one descheduler active."""

    name: str = "hostaffinity-descheduler"
    namespace: str = "hostaffinity"
    duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0


class DeschedulerSettings(Settings, frozen=True):
    """When cycles run and what the evictor enforces beyond the policy."""

    policy_file: str | None = None
    # A cycle runs this long after the first trigger (node uncordoned/Ready/added, vm.moved, pod
    # labels or affinity changed), so a burst of changes makes one cycle; and every interval.
    debounce_seconds: float = 0.5
    interval_seconds: float = 300.0
    dry_run: bool = False
    cooldown_seconds: float = 300.0
    # Follow KubeVirt VMIs and migrations (turn off where KubeVirt is not installed).
    kubevirt: bool = True
    kubevirt_default_eviction_strategy: str = "None"
    migrations: MigrationLimits = MigrationLimits()
    eviction: ExecutorSettings = ExecutorSettings()
    # The durable consumer that reads `vm.moved` from the events stream.
    consumer_durable: str = "hostaffinity-descheduler"


class DeschedulerConfig(ServiceSettings, frozen=True):
    """Everything the descheduler reads at start."""

    descheduler: DeschedulerSettings = DeschedulerSettings()
    lease: LeaseSettings = LeaseSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
