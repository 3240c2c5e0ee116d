"""Entry point: `hostaffinity-drs-translator --config shared.yaml --config drs-translator.yaml`."""

from collections.abc import Sequence
from typing import Final

from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.service import translate
from hostaffinity.runtime.runner import ServiceSpec, run_service

SPEC: Final = ServiceSpec(
    name="drs-translator", config_type=DrsTranslatorConfig, work=translate, leader_elected=True
)


def main(argv: Sequence[str] | None = None) -> None:
    run_service(SPEC, argv)


if __name__ == "__main__":
    main()
