"""The self-signed identity: what it names and how long it is kept."""

from __future__ import annotations

import datetime

from hostaffinity.runtime.http.certificates import (
    RENEW_BEFORE,
    SERVING_VALIDITY,
    issue,
    server_context,
    service_hostnames,
    still_serves,
)

NOW = datetime.datetime(2026, 11, 22, 13, 0, tzinfo=datetime.UTC)
NAMES = [*service_hostnames("scheduler-extender", "hostaffinity"), "127.0.0.1"]


def test_service_names_are_those_the_api_server_may_dial() -> None:
    assert service_hostnames("svc", "ns") == [
        "svc",
        "svc.ns",
        "svc.ns.svc",
        "svc.ns.svc.cluster.local",
    ]


def test_identity_is_kept_until_close_to_its_end() -> None:
    identity = issue(NAMES, NOW)
    assert still_serves(identity, NAMES, NOW)
    last_kept = NOW + SERVING_VALIDITY - RENEW_BEFORE - datetime.timedelta(hours=1)
    assert still_serves(identity, NAMES, last_kept)
    assert not still_serves(identity, NAMES, last_kept + datetime.timedelta(hours=2))


def test_identity_is_made_again_when_a_name_is_missing() -> None:
    identity = issue(NAMES[:2], NOW)
    assert not still_serves(identity, NAMES, NOW)


def test_a_damaged_identity_is_not_kept() -> None:
    identity = issue(NAMES, NOW)
    damaged = type(identity)(identity.ca_pem, b"not a certificate", identity.key_pem)
    assert not still_serves(damaged, NAMES, NOW)


def test_the_identity_loads_into_a_server_context() -> None:
    assert server_context(issue(NAMES, NOW)).get_ca_certs() == []
