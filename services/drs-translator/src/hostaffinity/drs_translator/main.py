"""Entry point: `hostaffinity-drs-translator --config shared.yaml --config drs-translator.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS, the Lease and SIGTERM; only the Lease holder translates (`DrsTranslatorWork`).
`--check-config` also checks that every vCenter's certificate is trusted (runtime vcenter/trust.py).
"""

from collections.abc import Sequence

from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.service import DrsTranslatorWork, readiness_parts
from hostaffinity.runtime.runner import ServiceSpec, run_service
from hostaffinity.runtime.vcenter.settings import for_each_vcenter
from hostaffinity.runtime.vcenter.trust import check_ca_file, check_trust


def service_spec(work: DrsTranslatorWork) -> ServiceSpec[DrsTranslatorConfig]:
    return ServiceSpec(
        name="drs-translator",
        config_type=DrsTranslatorConfig,
        work=work,
        leader_elected=True,
        checks=(for_each_vcenter(check_ca_file),),
        probes=(for_each_vcenter(check_trust),),
        readiness=readiness_parts,
    )


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(DrsTranslatorWork()), argv)


if __name__ == "__main__":
    main()
