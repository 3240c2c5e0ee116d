"""Entry point: `hostaffinity-drs-translator --config shared.yaml --config drs-translator.yaml`.

`--check-config` also checks that every vCenter's certificate is trusted (runtime vcenter_trust.py).
"""

from collections.abc import Sequence
from typing import Final

from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.service import translate
from hostaffinity.runtime.runner import ServiceSpec, run_service
from hostaffinity.runtime.vcenter import for_each_vcenter
from hostaffinity.runtime.vcenter_trust import check_ca_file, check_trust

SPEC: Final = ServiceSpec(
    name="drs-translator",
    config_type=DrsTranslatorConfig,
    work=translate,
    leader_elected=True,
    checks=(for_each_vcenter(check_ca_file),),
    probes=(for_each_vcenter(check_trust),),
)


def main(argv: Sequence[str] | None = None) -> None:
    run_service(SPEC, argv)


if __name__ == "__main__":
    main()
