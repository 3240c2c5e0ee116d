"""The descheduler's config record (YAML + HOSTAFFINITY_* environment), strict on unknown keys.

The eviction policy itself is an upstream DeschedulerPolicy file (`descheduler.policy_file`);
without one the built-in policy (policy.DEFAULT_POLICY) runs. A leaf: it imports no module of
the descheduler, whose core and shell both take their settings from it.
"""

from typing import Annotated, Final

import msgspec

from hostaffinity.runtime.process.config import (
    Count,
    Delay,
    LeaderElectedSettings,
    Seconds,
    Settings,
)

# KubeVirt's own limits where its CR names none (pkg/virt-config/virt-config.go, 5 and 2).
PARALLEL_MIGRATIONS_PER_CLUSTER: Final = 5
PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: Final = 2


class MigrationLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """KubeVirt's parallel migration limits, which the descheduler keeps to as well."""

    # 0 stops the descheduler from asking for migrations at all.
    per_cluster: Annotated[int, msgspec.Meta(ge=0)] = PARALLEL_MIGRATIONS_PER_CLUSTER
    outbound_per_node: Annotated[int, msgspec.Meta(ge=0)] = PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE


class ExecutorSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How evictions are sent."""

    parallelism: Count = 16
    retry_initial_seconds: Seconds = 2.0
    retry_max_seconds: Seconds = 60.0
    # After this many 429s the pod is treated as any other: the cooldown applies to it again.
    max_attempts: Count = 30
    grace_period_seconds: Annotated[int, msgspec.Meta(ge=0)] | None = None


class DeschedulerSettings(Settings, frozen=True):
    """When cycles run and what the eviction planner enforces beyond the policy."""

    policy_file: str | None = None
    # A cycle runs this long after the first trigger (node uncordoned/Ready/added, relabelled or
    # re-tainted, a placement changed in the topology KV, a pod assigned or its labels or affinity
    # changed), so a burst of changes makes one cycle (a vMotion's KV put and label patch arrive
    # within milliseconds); and every interval, judging every pod.
    debounce_seconds: Delay = 0.1
    interval_seconds: Seconds = 300.0
    # Plan and report evictions without sending them.
    dry_run: bool = False
    # A workload that lost a pod to the descheduler is left alone this long (loop guard).
    cooldown_seconds: Delay = 300.0
    # Follow KubeVirt VMIs and migrations (turn off where KubeVirt is not installed).
    kubevirt: bool = True
    # The VMI evictionStrategy assumed when a VMI names none (KubeVirt's cluster-wide setting).
    kubevirt_default_eviction_strategy: str = "None"
    # Parallel migration limits (per_cluster, outbound_per_node) overriding the KubeVirt CR's
    # (spec.configuration.migrations; KubeVirt's defaults 5 and 2 where it names none).
    migrations: MigrationLimits | None = None
    # How evictions are sent (parallelism, retries, grace period).
    eviction: ExecutorSettings = ExecutorSettings()


class DeschedulerConfig(LeaderElectedSettings, frozen=True):
    """Everything the descheduler reads at start; only the Lease holder (`lease`, by default
    `hostaffinity-descheduler`) deschedules."""

    descheduler: DeschedulerSettings = DeschedulerSettings()
