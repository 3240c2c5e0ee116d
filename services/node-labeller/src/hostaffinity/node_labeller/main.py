"""Entry point: `hostaffinity-node-labeller --config shared.yaml --config node-labeller.yaml`.

Wiring only: the runner (hostaffinity.runtime.runner) does argv, config, logging, telemetry,
health, NATS, the Lease and SIGTERM; only the Lease holder labels (`NodeLabelling`).
"""

from collections.abc import Sequence

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.node_labeller.service import NodeLabelling
from hostaffinity.runtime.runner import ServiceSpec, run_service


def service_spec(work: NodeLabelling) -> ServiceSpec[NodeLabellerConfig]:
    return ServiceSpec(
        name="node-labeller", config_type=NodeLabellerConfig, work=work, leader_elected=True
    )


def main(argv: Sequence[str] | None = None) -> None:
    run_service(service_spec(NodeLabelling()), argv)
