"""Entry point: `hostaffinity-scheduler-extender --config shared.yaml --config extender.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS and SIGTERM; every replica serves (`SchedulerExtenderWork`), no Lease.
"""

from collections.abc import Sequence

from hostaffinity.runtime.runner import ServiceSpec, run_service
from hostaffinity.scheduler_extender.config import SchedulerExtenderConfig
from hostaffinity.scheduler_extender.service import SchedulerExtenderWork, readiness_parts


def service_spec(work: SchedulerExtenderWork) -> ServiceSpec[SchedulerExtenderConfig]:
    return ServiceSpec(
        name="scheduler-extender",
        config_type=SchedulerExtenderConfig,
        work=work,
        readiness=readiness_parts,
    )


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(SchedulerExtenderWork()), argv)


if __name__ == "__main__":
    main()
