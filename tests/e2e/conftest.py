"""Fixtures of the end-to-end tests that run services in-process."""

from pathlib import Path

import pytest

from tests.platform.kube_double import KubeDouble


@pytest.fixture
def kubeconfig(kube_double: KubeDouble, tmp_path: Path) -> Path:
    """A kubeconfig file for the Kubernetes double, as the services load credentials."""
    return kube_double.write_kubeconfig(tmp_path / "kubeconfig")
