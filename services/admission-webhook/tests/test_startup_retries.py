"""The webhook's start-up steps (certificate Secret, caBundle) retry every transient API
failure: a kube-apiserver that goes away mid-answer must not leave the webhook never listening."""

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.admission_webhook import service


@pytest.mark.parametrize(
    "failure",
    [
        aiohttp.ServerDisconnectedError(),  # closed mid-answer: a ClientError, not an OSError
        ConnectionResetError("Cannot write to closing transport"),
        TimeoutError(),
        ApiException(status=503, reason="ServiceUnavailable"),
    ],
    ids=["disconnected", "reset", "timeout", "503"],
)
async def test_a_startup_step_is_retried_after_a_transient_api_failure(
    failure: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "RETRY_SECONDS", (0.01,))
    attempts: list[int] = []

    async def settle() -> str:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise failure
        return "settled"

    assert await service._retrying("settling the serving certificate", settle) == "settled"
    assert len(attempts) == 2
