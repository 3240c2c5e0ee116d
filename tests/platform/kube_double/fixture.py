"""The `kube_double` pytest fixture: a fresh double per test on 127.0.0.1, port 0; and
`kubeconfig`, a kubeconfig file for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .double import KubeDouble


@pytest.fixture
async def kube_double() -> AsyncIterator[KubeDouble]:
    """Yields the running double: `.url`, `.token`, `.configuration()`, and the test hooks."""
    double = KubeDouble()
    await double.start()
    try:
        yield double
    finally:
        await double.stop()


@pytest.fixture
def kubeconfig(kube_double: KubeDouble, tmp_path: Path) -> Path:
    """A kubeconfig file for the double, as the services load credentials."""
    return kube_double.write_kubeconfig(tmp_path / "kubeconfig")
