"""Fixtures of the end-to-end tests that run services in-process."""

from pathlib import Path

import pytest

from hostaffinity.runtime.process.telemetry import Telemetry, setup_telemetry
from tests.e2e.labeller_harness import LabellerParts
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory


@pytest.fixture
def parts(
    vcsim: VcsimFactory, nats_server: NatsServer, kube_double: KubeDouble, kubeconfig: Path
) -> LabellerParts:
    """vcsim, a nats-server and the Kubernetes double, for labeller replicas."""
    return LabellerParts(vcsim, nats_server, kube_double, kubeconfig)


@pytest.fixture
def telemetry() -> Telemetry:
    """Installed as a service would, so the counters reach /metrics (the registry)."""
    return setup_telemetry("hostaffinity-tests")
