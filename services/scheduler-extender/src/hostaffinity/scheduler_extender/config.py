"""The scheduler-extender's config record: the shared sections plus where and how it serves."""

from hostaffinity.runtime.config import ServiceSettings, Settings


class ExtenderSettings(Settings, frozen=True):
    """The HTTP endpoint kube-scheduler calls, and what the extender reports about it."""

    host: str = "0.0.0.0"
    port: int = 8888
    # Serve HTTPS when both are set (kube-scheduler's `enableHTTPS` + `tlsConfig`).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # Share of pods whose decisions are published as `extender.decision` events; by pod uid, so
    # a sampled pod's filter, prioritize and bind all appear together.
    decision_sample_ratio: float = 0.05
    # Decisions waiting to be published; beyond this they are dropped (and counted) rather than
    # slowing an answer down.
    decision_queue_size: int = 1000
    # Give up on the pods/binding call after this long; kube-scheduler's httpTimeout must be
    # longer so the answer still reaches it.
    bind_timeout_seconds: float = 4.0


class SchedulerExtenderSettings(ServiceSettings, frozen=True):
    """Everything the scheduler-extender reads at start."""

    extender: ExtenderSettings = ExtenderSettings()
