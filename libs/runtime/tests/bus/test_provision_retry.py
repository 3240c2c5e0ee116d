"""`Bus.provision` asks again while a just-formed cluster cannot take a request yet: no answer,
or a 503 "no suitable peers for placement" (err_code 10005) while a peer is still offline (seen
once when the three-server test bus was provisioned under load)."""

from __future__ import annotations

from typing import Any, cast

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import ServiceUnavailableError

import hostaffinity.runtime.bus.client as client
from hostaffinity.runtime.bus.client import PROVISION_ATTEMPTS, Bus
from hostaffinity.runtime.process.config import NatsSettings

NO_PEERS = ServiceUnavailableError(
    code=503, err_code=10005, description="no suitable peers for placement"
)


def refusing(errors: list[Exception]) -> Any:
    """A provision_layout that raises `errors` one per call, then succeeds."""

    async def provision_layout(js: Any, layout: Any) -> Any:
        if errors:
            raise errors.pop(0)
        return "the bucket"

    return provision_layout


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "LAYOUT_RETRY_SECONDS", 0.0)
    monkeypatch.setattr(client, "TopologyStore", lambda bucket: bucket)


def bus() -> Bus:
    return Bus(cast(Client, None), cast(JetStreamContext, None), NatsSettings())


async def test_no_peers_yet_and_no_answer_are_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    errors: list[Exception] = [NO_PEERS, nats.errors.TimeoutError(), NO_PEERS]
    monkeypatch.setattr(client, "provision_layout", refusing(errors))
    assert await bus().provision() == "the bucket"
    assert errors == []


async def test_a_bus_that_never_takes_it_fails_after_the_last_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    errors: list[Exception] = [NO_PEERS] * (PROVISION_ATTEMPTS + 1)
    monkeypatch.setattr(client, "provision_layout", refusing(errors))
    with pytest.raises(ServiceUnavailableError):
        await bus().provision()
    assert len(errors) == 1
