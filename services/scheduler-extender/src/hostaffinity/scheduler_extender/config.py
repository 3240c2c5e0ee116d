"""The scheduler-extender's config record: the shared sections plus where and how it serves."""

from hostaffinity.runtime.process.config import (
    Count,
    Delay,
    Port,
    Ratio,
    Seconds,
    ServiceSettings,
    Settings,
)


class ExtenderSettings(Settings, frozen=True):
    """The HTTP endpoint kube-scheduler calls, and what the extender reports about it."""

    host: str = "0.0.0.0"
    port: Port = 8888
    # Serve HTTPS when both are set (kube-scheduler's `enableHTTPS` + `tlsConfig`).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # Share of pods whose decisions are published as `extender.decision` events; by pod uid, so
    # a sampled pod's filter, prioritize and bind all appear together.
    decision_sample_ratio: Ratio = 0.05
    # Decisions waiting to be published; beyond this they are dropped (and counted) rather than
    # slowing an answer down.
    decision_queue_size: Count = 1000
    # Give up on the pods/binding call after this long; kube-scheduler's httpTimeout must be
    # longer so the answer still reaches it.
    bind_timeout_seconds: Seconds = 4.0
    # A request body over this is refused with 413. A full NodeList (nodeCacheCapable: false)
    # of 5,000 kubelet-reported nodes is ~55 MiB.
    max_body_bytes: Count = 256 * 2**20
    # Pods filtered and not yet reported bound ("in flight"): at most this many are kept (the
    # oldest go first), and none longer than the age, after which its placement is not waited
    # for nor its reservation counted.
    inflight_capacity: Count = 10_000
    inflight_max_age_seconds: Seconds = 30.0
    # The longest a filter waits for the placement of an in-flight pod that its own host-level
    # terms select and that holds no reservation; kube-scheduler's httpTimeout must be longer.
    inflight_wait_seconds: Delay = 0.5


class SchedulerExtenderConfig(ServiceSettings, frozen=True):
    """Everything the scheduler-extender reads at start."""

    extender: ExtenderSettings = ExtenderSettings()
