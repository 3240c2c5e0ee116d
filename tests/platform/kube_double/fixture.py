"""The `kube_double` pytest fixture: a fresh double per test on 127.0.0.1, port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
