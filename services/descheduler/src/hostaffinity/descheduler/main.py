"""Entry point: `hostaffinity-descheduler --config shared.yaml --config descheduler.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS, the Lease and SIGTERM; only the Lease holder deschedules (`DeschedulerWork`). The
policy file named in the config is checked by `--check-config` and before the start
(`check_policy`), and read again when the work starts.
"""

from collections.abc import Sequence

from hostaffinity.descheduler.config import DeschedulerConfig
from hostaffinity.descheduler.service import DeschedulerWork, check_policy, readiness_parts
from hostaffinity.runtime.runner import ServiceSpec, run_service


def service_spec(work: DeschedulerWork) -> ServiceSpec[DeschedulerConfig]:
    return ServiceSpec(
        name="descheduler",
        config_type=DeschedulerConfig,
        work=work,
        leader_elected=True,
        checks=(check_policy,),
        readiness=readiness_parts,
    )


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(DeschedulerWork()), argv)


if __name__ == "__main__":
    main()
