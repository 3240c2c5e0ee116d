"""The descheduler's config record (YAML + HOSTAFFINITY_* environment), strict on unknown keys.

The eviction policy itself is an upstream DeschedulerPolicy file (`descheduler.policy_file`);
without one the built-in policy (policy.DEFAULT_POLICY) runs.
"""

from hostaffinity.descheduler.core.kubevirt import MigrationLimits
from hostaffinity.descheduler.executor import ExecutorSettings
from hostaffinity.runtime.process.config import Delay, LeaderElectedSettings, Seconds, Settings


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
