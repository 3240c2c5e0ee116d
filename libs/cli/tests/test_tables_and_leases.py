"""Terminal tables and who leads each service, read from its Lease (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hostaffinity.cli.leases import Leadership, Lease, LeaseSpec, leadership, parse_time
from hostaffinity.cli.tables import table

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def test_columns_are_as_wide_as_their_widest_cell_without_trailing_spaces() -> None:
    assert table(("NAME", "HOST"), [("worker-1", "esx-a"), ("w2", "")]) == (
        "NAME      HOST\nworker-1  esx-a\nw2"
    )


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="zip"):
        table(("A", "B"), [("only one",)])


def test_kubernetes_times_read_as_utc() -> None:
    assert parse_time("2026-11-25T11:59:50.123456Z") == datetime(
        2026, 11, 25, 11, 59, 50, 123456, tzinfo=UTC
    )


def _lease(renewed: str, duration: int = 15, holder: str = "pod-a") -> Lease:
    return Lease(
        spec=LeaseSpec(
            holder_identity=holder,
            acquire_time="2026-11-25T11:00:00Z",
            renew_time=renewed,
            lease_duration_seconds=duration,
        )
    )


def test_a_live_lease_names_its_holder_and_how_long_it_has_held() -> None:
    assert leadership("descheduler", _lease("2026-11-25T11:59:55Z"), NOW) == Leadership(
        service="descheduler",
        lease="hostaffinity-descheduler",
        holder="pod-a",
        acquired_at="2026-11-25T11:00:00Z",
        renewed_at="2026-11-25T11:59:55Z",
        held_seconds=3600.0,
    )


@pytest.mark.parametrize(
    "lease",
    [
        pytest.param(_lease("2026-11-25T11:59:40Z", duration=15), id="expired"),
        pytest.param(_lease("2026-11-25T11:59:55Z", holder=""), id="released"),
        pytest.param(None, id="missing"),
    ],
)
def test_an_expired_released_or_missing_lease_names_no_leader(lease: Lease | None) -> None:
    found = leadership("node-labeller", lease, NOW)
    assert (found.lease, found.holder, found.held_seconds) == ("hostaffinity-node-labeller", "", 0)
