"""The admission-webhook's config record: the shared sections plus where and how it serves."""

from typing import Literal

import msgspec

from hostaffinity.runtime.process.config import Count, Port, Ratio, ServiceSettings, Settings


class WebhookSettings(Settings, frozen=True):
    """The mutating admission webhook (`POST /mutate`), HTTPS on its own port."""

    host: str = "0.0.0.0"
    port: Port = 8443
    # "self-signed": the service makes a CA and serving certificate, keeps them in `secret_name`
    # (shared by the replicas) and writes the CA into `configuration_name` at start.
    # "files": a mounted certificate (cert-manager's Secret); its injector writes the caBundle.
    certificates: Literal["self-signed", "files"] = "self-signed"
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # The Service in front of the replicas: the self-signed certificate is for its DNS names.
    service_name: str = "admission-webhook"
    # More names for the self-signed certificate, e.g. 127.0.0.1 when the API server reaches
    # the webhook by URL (compose, make dev).
    extra_hostnames: list[str] = msgspec.field(default_factory=list)
    # The Secret that keeps the self-signed CA and certificate, and the
    # MutatingWebhookConfiguration whose caBundle the service writes.
    secret_name: str = "hostaffinity-webhook-tls"
    configuration_name: str = "hostaffinity-pod-host-terms"
    # How a spread over hosts (annotation hostaffinity.io/spread-across-hosts) treats a skew it
    # cannot keep: "ScheduleAnyway" prefers, "DoNotSchedule" requires.
    spread_when_unsatisfiable: Literal["ScheduleAnyway", "DoNotSchedule"] = "ScheduleAnyway"
    # Share of patched pods published as `pod.mutated` events (by admission request uid).
    event_sample_ratio: Ratio = 0.05
    # Events waiting to be published; beyond this they are dropped (and counted) rather than
    # slowing a review down.
    event_queue_size: Count = 1000
    # The API server's requests are bounded by its own object size limit (about 1.5 MiB).
    max_body_bytes: Count = 4 * 1024 * 1024


class AdmissionWebhookConfig(ServiceSettings, frozen=True):
    """Everything the admission-webhook reads at start."""

    webhook: WebhookSettings = WebhookSettings()
