"""Pure helpers of the bus connection: event subjects and TLS plumbing."""

import pytest

from hostaffinity.runtime.bus.client import event_type, tls_context
from hostaffinity.runtime.process.config import NatsSettings
from hostaffinity.schema import Event, NodeUnmatched


def test_event_type_is_the_tag_of_the_event_class() -> None:
    event = NodeUnmatched(id="x", occurred_at="t", source="s", node="n", reason="r")

    assert event_type(event) == "node.unmatched"


def test_base_event_is_not_a_publishable_type() -> None:
    with pytest.raises(TypeError, match="not one of the schema's event types"):
        event_type(Event(id="x", occurred_at="t", source="s"))


def test_no_tls_context_without_tls_files() -> None:
    assert tls_context(NatsSettings()) is None


def test_missing_ca_file_is_an_error_at_connect_time_not_silently_ignored() -> None:
    with pytest.raises(FileNotFoundError):
        tls_context(NatsSettings(tls_ca_file="/nonexistent/ca.pem"))
