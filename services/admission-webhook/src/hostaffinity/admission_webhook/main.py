"""Entry point: `hostaffinity-admission-webhook --config shared.yaml --config webhook.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS and SIGTERM; every replica serves (`AdmissionWebhookWork`), no Lease.
"""

from collections.abc import Sequence

from hostaffinity.admission_webhook.config import AdmissionWebhookConfig
from hostaffinity.admission_webhook.service import AdmissionWebhookWork, readiness_parts
from hostaffinity.runtime.runner import ServiceSpec, run_service


def service_spec(work: AdmissionWebhookWork) -> ServiceSpec[AdmissionWebhookConfig]:
    return ServiceSpec(
        name="admission-webhook",
        config_type=AdmissionWebhookConfig,
        work=work,
        readiness=readiness_parts,
    )


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(AdmissionWebhookWork()), argv)


if __name__ == "__main__":
    main()
