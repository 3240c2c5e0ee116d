"""Fixtures of the integration tests that drive the `hostaffinity` command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.cli_runner import Cli
from tests.platform.nats import NatsServer


@pytest.fixture
def cli(kubeconfig: Path, nats_server: NatsServer, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(kubeconfig, nats_server, capsys)
