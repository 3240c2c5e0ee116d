"""Entry point: `hostaffinity-node-labeller --config shared.yaml --config node-labeller.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS, the Lease and SIGTERM; only the Lease holder labels (`NodeLabellerWork`).
`--check-config` also checks that every vCenter's certificate is trusted (runtime vcenter/trust.py).
"""

from collections.abc import Sequence

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.service import NodeLabellerWork, readiness_parts
from hostaffinity.runtime.runner import ServiceSpec, run_service
from hostaffinity.runtime.vcenter.settings import for_each_vcenter
from hostaffinity.runtime.vcenter.trust import check_ca_file, check_trust


def service_spec(work: NodeLabellerWork) -> ServiceSpec[NodeLabellerConfig]:
    return ServiceSpec(
        name="node-labeller",
        config_type=NodeLabellerConfig,
        work=work,
        leader_elected=True,
        checks=(for_each_vcenter(check_ca_file),),
        probes=(for_each_vcenter(check_trust),),
        readiness=readiness_parts,
    )


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(NodeLabellerWork()), argv)


if __name__ == "__main__":
    main()
