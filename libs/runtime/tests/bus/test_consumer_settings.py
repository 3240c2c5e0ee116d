"""Consumer settings: the server-side consumer they make and what the server would reject."""

import pytest
from nats.js.api import AckPolicy

from hostaffinity.runtime.bus.consumer import ConsumerSettings


def test_backoff_as_long_as_max_deliver_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"max_deliver \(3\) must exceed .* \(3\)"):
        ConsumerSettings(durable="svc", backoff_seconds=(1.0, 2.0, 3.0), max_deliver=3)


def test_consumer_config_is_durable_with_explicit_ack() -> None:
    settings = ConsumerSettings(durable="descheduler", backoff_seconds=(), max_deliver=4)

    config = settings.consumer_config()

    assert (config.name, config.durable_name) == ("descheduler", "descheduler")
    assert config.ack_policy == AckPolicy.EXPLICIT
    assert config.filter_subject == "hostaffinity.events.>"
    assert config.backoff is None
    assert config.max_deliver == 4
