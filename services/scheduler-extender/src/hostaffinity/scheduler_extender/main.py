"""Entry point: `hostaffinity-scheduler-extender --config shared.yaml --config extender.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS and SIGTERM; every replica serves (`Extender`), no Lease.
"""

from collections.abc import Sequence

from hostaffinity.runtime.runner import ServiceSpec, run_service
from hostaffinity.scheduler_extender.config import SchedulerExtenderSettings
from hostaffinity.scheduler_extender.service import Extender


def service_spec(work: Extender) -> ServiceSpec[SchedulerExtenderSettings]:
    return ServiceSpec(name="scheduler-extender", config_type=SchedulerExtenderSettings, work=work)


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(Extender()), argv)
