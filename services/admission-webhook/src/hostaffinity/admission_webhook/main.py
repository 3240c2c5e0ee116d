"""Entry point: `hostaffinity-admission-webhook --config shared.yaml --config webhook.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS and SIGTERM; every replica serves (`Webhook`), no Lease.
"""

from collections.abc import Sequence

from hostaffinity.admission_webhook.config import AdmissionWebhookSettings
from hostaffinity.admission_webhook.service import Webhook
from hostaffinity.runtime.runner import ServiceSpec, run_service


def service_spec(work: Webhook) -> ServiceSpec[AdmissionWebhookSettings]:
    return ServiceSpec(name="admission-webhook", config_type=AdmissionWebhookSettings, work=work)


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(Webhook()), argv)
